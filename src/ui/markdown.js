// A small, safe Markdown renderer for model output.
//
// Safety rule: the whole text is HTML-escaped first (& < > " '), and only then are
// Markdown constructs turned into the handful of tags produced here. Nothing in the
// input can therefore become a tag or an attribute; the only attribute values taken
// from the input are link targets, which must start with http:// or https:// and are
// already escaped. Code-fence languages are reduced to [A-Za-z0-9_+#.-].

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

/** Escapes & < > " ' for use in HTML text and quoted attribute values. */
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

// Placeholders (\u0000<n>\u0000) keep finished HTML away from later inline rules.
// The input never contains \u0000: it is replaced before anything else.
const HOLE = /\u0000(\d+)\u0000/g;

// An http(s) URL in escaped text: stops at whitespace and at escaped < > " '.
const BARE_URL = /\bhttps?:\/\/(?:(?!&lt;|&gt;|&quot;|&#39;)[^\s\u0000])+/gi;
const MD_LINK = /\[([^\]\u0000\n]+)\]\((https?:\/\/[^\s()\u0000]+(?:\([^\s()\u0000]*\)[^\s()\u0000]*)*)\)/gi;

function emphasis(s) {
  return s
    .replace(/\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*/g, "<em><strong>$1</strong></em>")
    .replace(/\*\*(?=\S)(.+?)(?<=\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(?<![\p{L}\p{N}_])__(?=\S)(.+?)(?<=\S)__(?![\p{L}\p{N}_])/gu, "<strong>$1</strong>")
    .replace(/(?<!\*)\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?!\*)/g, "<em>$1</em>")
    .replace(/(?<![\p{L}\p{N}_])_(?=[^\s_])(.+?)(?<=[^\s_])_(?![\p{L}\p{N}_])/gu, "<em>$1</em>")
    .replace(/~~(?=\S)(.+?)(?<=\S)~~/g, "<del>$1</del>");
}

// Trailing punctuation is usually the sentence's, not the URL's; a ")" is kept when it
// closes a "(" of the URL itself.
function trimUrl(url) {
  const count = (s, c) => s.split(c).length - 1;
  while (/[.,;:!?\])]$/.test(url)) {
    if (url.endsWith(")") && count(url, "(") >= count(url, ")")) break;
    url = url.slice(0, -1);
  }
  return url;
}

function anchor(href, label) {
  return `<a href="${href}" rel="noopener noreferrer" target="_blank">${label}</a>`;
}

/** Inline Markdown on one block of already-escaped text; newlines become <br>. */
function inline(escaped) {
  const held = [];
  const hold = (html) => `\u0000${held.push(html) - 1}\u0000`;
  let s = escaped
    // Inline code first: nothing inside it is formatted.
    .replace(/(`+)([\s\S]+?)\1(?!`)/g, (_, _ticks, code) => hold(`<code>${code}</code>`))
    .replace(MD_LINK, (_, label, href) => hold(anchor(href, emphasis(label))))
    .replace(BARE_URL, (url) => {
      const href = trimUrl(url);
      return hold(anchor(href, href)) + url.slice(href.length);
    });
  s = emphasis(s).replace(/\n/g, "<br>");
  // Held HTML may itself contain holes (code inside a link label): resolve until none.
  for (let i = 0; i < 4 && s.includes("\u0000"); i++) {
    s = s.replace(HOLE, (_, n) => held[Number(n)]);
  }
  return s;
}

const FENCE = /^ {0,3}(`{3,})\s*([^`\s&]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}&gt; ?(.*)$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;

/** Renders a list starting at lines[i]; returns [html, next index]. */
function list(lines, i) {
  // Each open list: {indent, ordered}; items are closed lazily.
  const stack = [];
  let html = "";
  let text = null; // the text of the open item, rendered when it closes
  const flush = () => {
    if (text !== null) html += inline(text);
    text = null;
  };
  const open = (indent, ordered, start) => {
    stack.push({ indent, ordered });
    const attr = ordered && start !== 1 ? ` start="${start}"` : "";
    html += ordered ? `<ol${attr}>` : "<ul>";
  };
  const close = () => {
    flush();
    const l = stack.pop();
    html += l.ordered ? "</li></ol>" : "</li></ul>";
  };
  for (; i < lines.length; i++) {
    const line = lines[i];
    const m = line.match(ITEM);
    if (!m) {
      // A blank line between items keeps the list going.
      if (line.trim() === "" && ITEM.test(lines[i + 1] ?? "")) continue;
      // An indented line continues the open item; anything else ends the list.
      if (line.trim() !== "" && /^\s/.test(line) && text !== null) {
        text += "\n" + line.trim();
        continue;
      }
      break;
    }
    const indent = m[1].replace(/\t/g, "    ").length;
    const ordered = /\d/.test(m[2]);
    while (stack.length && indent < stack[stack.length - 1].indent) close();
    const top = stack[stack.length - 1];
    if (!top || indent > top.indent) {
      flush(); // a nested list goes inside the open item
      open(indent, ordered, parseInt(m[2], 10));
    } else if (top.ordered !== ordered) {
      close();
      open(indent, ordered, parseInt(m[2], 10));
    } else {
      flush();
      html += "</li>";
    }
    html += "<li>";
    text = m[3];
  }
  while (stack.length) close();
  return [html, i];
}

// Quotes nest at most this deep; deeper `>` markers stay text (a model repeating `>`
// must not make rendering deep or slow).
const MAX_QUOTE_DEPTH = 8;

/** Markdown text -> safe HTML string. */
export function renderMarkdown(text) {
  return render(text, 0);
}

function render(text, depth) {
  const lines = escapeHtml(String(text ?? "").replace(/\u0000/g, "\uFFFD"))
    .replace(/\r\n?/g, "\n")
    .split("\n");
  const out = [];
  let para = [];
  const endPara = () => {
    if (para.length) out.push(`<p>${inline(para.join("\n"))}</p>`);
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    let m;
    if ((m = line.match(FENCE))) {
      endPara();
      const lang = m[2].replace(/[^A-Za-z0-9_+#.-]/g, "");
      const closing = new RegExp(`^ {0,3}${m[1]}\`*\\s*$`);
      const body = [];
      // An unclosed fence (still streaming) runs to the end of the text.
      for (i++; i < lines.length && !closing.test(lines[i]); i++) body.push(lines[i]);
      const cls = lang ? ` class="language-${lang}"` : "";
      out.push(`<pre><code${cls}>${body.join("\n")}</code></pre>`);
    } else if (line.trim() === "") {
      endPara();
    } else if ((m = line.match(HEADING))) {
      endPara();
      const n = m[1].length;
      out.push(`<h${n}>${inline(m[2])}</h${n}>`);
    } else if (RULE.test(line)) {
      endPara();
      out.push("<hr>");
    } else if (QUOTE.test(line) && depth < MAX_QUOTE_DEPTH) {
      endPara();
      const quoted = [];
      for (; i < lines.length && (m = lines[i].match(QUOTE)); i++) quoted.push(m[1]);
      i--;
      out.push(`<blockquote>${render(unescapeHtml(quoted.join("\n")), depth + 1)}</blockquote>`);
    } else if (ITEM.test(line) && (para.length === 0 || !/^\s/.test(line))) {
      endPara();
      const [html, next] = list(lines, i);
      out.push(html);
      i = next - 1;
    } else {
      para.push(line.trim());
    }
  }
  endPara();
  return out.join("\n");
}

// Blockquote bodies are rendered recursively, which escapes again: undo the first pass.
const UNESCAPES = { "&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#39;": "'" };
function unescapeHtml(s) {
  return s.replace(/&(?:amp|lt|gt|quot|#39);/g, (e) => UNESCAPES[e]);
}
