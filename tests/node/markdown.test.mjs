// Unit tests of the chat page's Markdown renderer (no server needed):
//   node --test tests/node/markdown.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";

import { escapeHtml, renderMarkdown } from "../../src/ui/markdown.js";

/** Tags in rendered HTML: every "<name" that starts an element. */
const tags = (html) => [...html.matchAll(/<([a-z][a-z0-9]*)/gi)].map((m) => m[1].toLowerCase());
const ALLOWED = new Set([
  "p", "br", "strong", "em", "del", "code", "pre", "a", "ul", "ol", "li",
  "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "hr",
]);

/** No tag but ours, and no attribute but ours, each quoted with no quote inside. */
function assertSafe(html) {
  for (const t of tags(html)) assert.ok(ALLOWED.has(t), `unexpected <${t}> in ${html}`);
  for (const [tag] of html.matchAll(/<[a-z][^>]*>/gi)) {
    const rest = tag.replace(/^<[a-z0-9]+/i, "").replace(/\s(href|rel|target|class|start)="[^"<>]*"/g, "");
    assert.match(rest, /^\s*>$/, `unexpected attributes in ${tag}`);
  }
  assert.doesNotMatch(html, /href="(?!https?:\/\/)/i);
}

test("escapes all five HTML characters", () => {
  assert.equal(escapeHtml(`<a href="x" title='y'>&</a>`),
    "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;");
  assert.equal(renderMarkdown(`a & b < c > d " e ' f`),
    "<p>a &amp; b &lt; c &gt; d &quot; e &#39; f</p>");
});

test("script, img, iframe and friends stay literal text", () => {
  const cases = [
    "<script>window.__pwned=1</script>",
    `<img src=x onerror="window.__pwned=2">`,
    `<img src='x' onerror='alert(1)'>`,
    `<iframe src="javascript:alert(1)"></iframe>`,
    `<svg onload=alert(1)>`,
    `<a href="javascript:alert(1)">x</a>`,
    "<style>body{display:none}</style>",
    "<scr<script>ipt>alert(1)</script>",
    "**<script>alert(1)</script>**",
    "# <img src=x onerror=alert(1)>",
    "- <iframe srcdoc='<script>alert(1)</script>'>",
    "> <script>alert(1)</script>",
  ];
  for (const text of cases) {
    const html = renderMarkdown(text);
    assertSafe(html);
    assert.doesNotMatch(html, /<(script|img|iframe|svg|style)/i, html);
  }
  assert.equal(
    renderMarkdown(`**bold** <script>window.__pwned=1</script> <img src=x onerror="window.__pwned=2">`),
    "<p><strong>bold</strong> &lt;script&gt;window.__pwned=1&lt;/script&gt; " +
      "&lt;img src=x onerror=&quot;window.__pwned=2&quot;&gt;</p>",
  );
});

test("quotes cannot break out of a link's href", () => {
  const html = renderMarkdown(`[x](https://example.com/"onmouseover="alert(1)) and https://a.example/'x"y`);
  assertSafe(html);
  assert.ok(html.includes(`href="https://example.com/&quot;onmouseover=&quot;alert`), html);
  assert.doesNotMatch(html, /href="[^"]*"[^>]*onmouseover/);
  assert.ok(html.includes(`href="https://a.example/"`), html);
});

test("javascript:, data: and other schemes are never linked", () => {
  for (const text of [
    "[click](javascript:alert(1))",
    "[click](JavaScript:alert(1))",
    "[click](data:text/html,<script>alert(1)</script>)",
    "[click](vbscript:msgbox)",
    "[click]( javascript:alert(1))",
    "javascript:alert(1)",
  ]) {
    const html = renderMarkdown(text);
    assertSafe(html);
    assert.doesNotMatch(html, /<a /, html);
  }
});

test("http(s) links open safely in a new tab", () => {
  assert.equal(
    renderMarkdown("see [the docs](https://example.com/a?b=1&c=2)"),
    `<p>see <a href="https://example.com/a?b=1&amp;c=2" rel="noopener noreferrer" target="_blank">the docs</a></p>`,
  );
  assert.equal(
    renderMarkdown("go to http://example.com/x_(y)."),
    `<p>go to <a href="http://example.com/x_(y)" rel="noopener noreferrer" target="_blank">http://example.com/x_(y)</a>.</p>`,
  );
  // Underscores in a URL are not emphasis.
  assert.ok(renderMarkdown("https://e.com/a_b_c").includes(`href="https://e.com/a_b_c"`));
});

test("code fences keep their content escaped and unformatted", () => {
  const html = renderMarkdown("```html\n<script>alert('x')</script>\n**not bold** [a](https://b.c)\n```\nafter");
  assert.equal(
    html,
    `<pre><code class="language-html">&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;\n` +
      `**not bold** [a](https://b.c)</code></pre>\n<p>after</p>`,
  );
  // No language; an unclosed fence (mid-stream) runs to the end.
  assert.equal(renderMarkdown("```\na < b"), "<pre><code>a &lt; b</code></pre>");
  // The language cannot inject an attribute.
  const evil = renderMarkdown('```js"onmouseover="alert(1)\nx\n```');
  assertSafe(evil);
  assert.doesNotMatch(evil, /onmouseover/);
});

test("inline code is escaped and not formatted", () => {
  assert.equal(renderMarkdown("use `<b>*x*</b>` here"), "<p>use <code>&lt;b&gt;*x*&lt;/b&gt;</code> here</p>");
});

test("bold, italics and strikethrough", () => {
  assert.equal(renderMarkdown("**b** __b__ *i* _i_ ~~s~~"),
    "<p><strong>b</strong> <strong>b</strong> <em>i</em> <em>i</em> <del>s</del></p>");
  assert.equal(renderMarkdown("***both***"), "<p><em><strong>both</strong></em></p>");
  // Not emphasis: snake_case, lone stars, arithmetic.
  assert.equal(renderMarkdown("snake_case_name and 2 * 3 * 4"), "<p>snake_case_name and 2 * 3 * 4</p>");
});

test("headings", () => {
  assert.equal(renderMarkdown("# One\n## Two **b**\n###### Six ##"),
    "<h1>One</h1>\n<h2>Two <strong>b</strong></h2>\n<h6>Six</h6>");
  assert.equal(renderMarkdown("#hashtag"), "<p>#hashtag</p>");
});

test("unordered, ordered and nested lists", () => {
  assert.equal(renderMarkdown("- a\n* b\n+ c"), "<ul><li>a</li><li>b</li><li>c</li></ul>");
  assert.equal(renderMarkdown("Steps:\n1. one\n2. **two**"),
    "<p>Steps:</p>\n<ol><li>one</li><li><strong>two</strong></li></ol>");
  assert.equal(renderMarkdown("3. c\n4. d"), `<ol start="3"><li>c</li><li>d</li></ol>`);
  assert.equal(renderMarkdown("1. a\n   - x\n   - y\n2. b"),
    "<ol><li>a<ul><li>x</li><li>y</li></ul></li><li>b</li></ol>");
  // A blank line between items keeps one list.
  assert.equal(renderMarkdown("1. a\n\n2. b"), "<ol><li>a</li><li>b</li></ol>");
});

test("paragraphs and line breaks", () => {
  assert.equal(renderMarkdown("one\ntwo\n\nthree"), "<p>one<br>two</p>\n<p>three</p>");
  assert.equal(renderMarkdown("a\r\nb"), "<p>a<br>b</p>");
  assert.equal(renderMarkdown(""), "");
  assert.equal(renderMarkdown("> quoted *x*"), "<blockquote><p>quoted <em>x</em></p></blockquote>");
  assert.equal(renderMarkdown("---"), "<hr>");
});

test("NUL characters cannot forge placeholders", () => {
  const html = renderMarkdown("`<b>` \u00000\u0000 **x**");
  assertSafe(html);
  assert.doesNotMatch(html, /\u0000/);
  assert.equal((html.match(/<code>/g) || []).length, 1);
});

test("random mixes of Markdown and HTML characters stay safe", () => {
  // A fixed-seed generator: the same cases on every run.
  let seed = 12345;
  const rand = (n) => ((seed = (seed * 1103515245 + 12345) % 2147483648) % n);
  const pieces = [
    "<", ">", "&", '"', "'", "`", "```", "*", "**", "_", "__", "~~", "[", "]", "(", ")",
    "\n", "\n\n", " ", "# ", "- ", "1. ", "> ", "    ", "http://", "https://x.y/",
    "javascript:", "script", "img", "onerror=", "a", "\u0000", "0", "=",
  ];
  for (let i = 0; i < 3000; i++) {
    let text = "";
    for (let j = rand(40); j >= 0; j--) text += pieces[rand(pieces.length)];
    assertSafe(renderMarkdown(text));
  }
});

test("deeply nested quotes stop nesting and stay fast", () => {
  const start = performance.now();
  const html = renderMarkdown(">".repeat(5000) + " hi\n" + "> ".repeat(3000) + "there");
  assert.ok(performance.now() - start < 1000, "rendered in under a second");
  assert.ok((html.match(/<blockquote>/g) || []).length <= 16);
  assert.ok(html.includes("hi") && html.includes("there"));
  assert.ok(!html.includes("<script"));
});
