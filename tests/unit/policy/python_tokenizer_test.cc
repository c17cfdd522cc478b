// The Python tokenizer of the static checker: token kinds as CPython 3.12's
// `tokenize` names them, every string form, f-strings split PEP 701 style,
// NEWLINE vs NL, INDENT/DEDENT, continuations, positions, string decoding and
// the errors it stops at.

#include "policy/static_check/python_tokenizer.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kbox::static_check {
namespace {

using K = PyTokenKind;

std::string_view KindName(K kind) {
  switch (kind) {
    case K::kName:
      return "NAME";
    case K::kNumber:
      return "NUMBER";
    case K::kString:
      return "STRING";
    case K::kFStringStart:
      return "FSTRING_START";
    case K::kFStringMiddle:
      return "FSTRING_MIDDLE";
    case K::kFStringEnd:
      return "FSTRING_END";
    case K::kOp:
      return "OP";
    case K::kComment:
      return "COMMENT";
    case K::kNewline:
      return "NEWLINE";
    case K::kNl:
      return "NL";
    case K::kIndent:
      return "INDENT";
    case K::kDedent:
      return "DEDENT";
    case K::kEndMarker:
      return "ENDMARKER";
  }
  return "?";
}

// The token stream as one line: `NAME(x) OP(=) NUMBER(1) NEWLINE ENDMARKER`.
// Layout tokens are shown without their text. An error is appended as
// `ERROR@line:column`.
std::string Dump(std::string_view source) {
  const PyTokenizeResult r = TokenizePython(source);
  std::string out;
  for (const PyToken& t : r.tokens) {
    if (!out.empty()) out += ' ';
    out += KindName(t.kind);
    if (t.kind != K::kNewline && t.kind != K::kNl && t.kind != K::kIndent && t.kind != K::kDedent &&
        t.kind != K::kEndMarker) {
      out += '(';
      out += t.text;
      out += ')';
    }
  }
  if (r.error) {
    if (!out.empty()) out += ' ';
    out += "ERROR@" + std::to_string(r.error->line) + ":" + std::to_string(r.error->column);
  }
  return out;
}

// The only token of `source` that is not layout (NEWLINE, NL, ENDMARKER).
PyToken Single(std::string_view source) {
  const PyTokenizeResult r = TokenizePython(source);
  EXPECT_FALSE(r.error) << source << ": " << r.error->message;
  std::vector<PyToken> kept;
  for (const PyToken& t : r.tokens) {
    if (t.kind != K::kNewline && t.kind != K::kNl && t.kind != K::kEndMarker) kept.push_back(t);
  }
  EXPECT_EQ(kept.size(), 1u) << Dump(source);
  return kept.empty() ? PyToken{K::kEndMarker, {}, 0, 0, 0} : kept.front();
}

const PyToken* FirstOf(const PyTokenizeResult& r, K kind) {
  for (const PyToken& t : r.tokens) {
    if (t.kind == kind) return &t;
  }
  return nullptr;
}

std::string ErrorMessage(std::string_view source) {
  const PyTokenizeResult r = TokenizePython(source);
  return r.error ? r.error->message : std::string();
}

// ---- basics ----------------------------------------------------------------

TEST(PythonTokenizerTest, SimpleStatement) { EXPECT_EQ(Dump("x = 1\n"), "NAME(x) OP(=) NUMBER(1) NEWLINE ENDMARKER"); }

TEST(PythonTokenizerTest, EmptySourceIsOnlyEndMarker) {
  EXPECT_EQ(Dump(""), "ENDMARKER");
  EXPECT_EQ(Dump("\n\n"), "NL NL ENDMARKER");
}

TEST(PythonTokenizerTest, LastLineWithoutNewlineStillEndsItsLogicalLine) {
  EXPECT_EQ(Dump("x = 1"), "NAME(x) OP(=) NUMBER(1) NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, Numbers) {
  EXPECT_EQ(Dump("0x1F 1_000 1.5e-3 1e+5j .5 5. 0o17 0b101\n"),
            "NUMBER(0x1F) NUMBER(1_000) NUMBER(1.5e-3) NUMBER(1e+5j) NUMBER(.5) NUMBER(5.) NUMBER(0o17) "
            "NUMBER(0b101) NEWLINE ENDMARKER");
  // In hex, `e` is a digit, so the sign is an operator.
  EXPECT_EQ(Dump("0x1e+5\n"), "NUMBER(0x1e) OP(+) NUMBER(5) NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, MultiCharacterOperatorsAreOneToken) {
  EXPECT_EQ(Dump("a **= b //= c >>= d <<= e -> f := g ** h // i != j @= k ... @ l\n"),
            "NAME(a) OP(**=) NAME(b) OP(//=) NAME(c) OP(>>=) NAME(d) OP(<<=) NAME(e) OP(->) NAME(f) OP(:=) "
            "NAME(g) OP(**) NAME(h) OP(//) NAME(i) OP(!=) NAME(j) OP(@=) NAME(k) OP(...) OP(@) NAME(l) "
            "NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, TokenHelpers) {
  const PyTokenizeResult r = TokenizePython("torch.mm(a)\n");
  ASSERT_FALSE(r.error);
  ASSERT_GE(r.tokens.size(), 3u);
  EXPECT_TRUE(r.tokens[0].IsName("torch"));
  EXPECT_TRUE(r.tokens[1].IsOp("."));
  EXPECT_TRUE(r.tokens[2].Is(K::kName, "mm"));
  EXPECT_FALSE(r.tokens[2].IsOp("mm"));
}

// ---- positions -------------------------------------------------------------

TEST(PythonTokenizerTest, LineAndColumnOfEveryToken) {
  const std::string_view src = "a = b\n  # note\nif x:\n    y(1)\n";
  const PyTokenizeResult r = TokenizePython(src);
  ASSERT_FALSE(r.error);
  struct Want {
    K kind;
    std::string_view text;
    uint32_t line, column;
  };
  const std::vector<Want> want = {
      {K::kName, "a", 1, 1},         {K::kOp, "=", 1, 3},       {K::kName, "b", 1, 5},      {K::kNewline, "\n", 1, 6},
      {K::kComment, "# note", 2, 3}, {K::kNl, "\n", 2, 9},      {K::kName, "if", 3, 1},     {K::kName, "x", 3, 4},
      {K::kOp, ":", 3, 5},           {K::kNewline, "\n", 3, 6}, {K::kIndent, "    ", 4, 1}, {K::kName, "y", 4, 5},
      {K::kOp, "(", 4, 6},           {K::kNumber, "1", 4, 7},   {K::kOp, ")", 4, 8},        {K::kNewline, "\n", 4, 9},
  };
  ASSERT_GE(r.tokens.size(), want.size()) << Dump(src);
  for (size_t i = 0; i < want.size(); ++i) {
    const PyToken& t = r.tokens[i];
    EXPECT_EQ(t.kind, want[i].kind) << "token " << i << " " << Dump(src);
    EXPECT_EQ(t.text, want[i].text) << "token " << i;
    EXPECT_EQ(t.line, want[i].line) << "token " << i << " `" << t.text << "`";
    EXPECT_EQ(t.column, want[i].column) << "token " << i << " `" << t.text << "`";
    EXPECT_EQ(t.end_line, want[i].line) << "token " << i << " `" << t.text << "`";
  }
  EXPECT_EQ(r.tokens.back().kind, K::kEndMarker);
  EXPECT_EQ(r.tokens[r.tokens.size() - 2].kind, K::kDedent);
}

TEST(PythonTokenizerTest, TokensAreViewsOfTheSource) {
  const std::string src = "def f(a, b):\n    return a @ b  # mm\n";
  const PyTokenizeResult r = TokenizePython(src);
  ASSERT_FALSE(r.error);
  for (const PyToken& t : r.tokens) {
    if (t.text.empty()) continue;
    EXPECT_GE(t.text.data(), src.data());
    EXPECT_LE(t.text.data() + t.text.size(), src.data() + src.size());
  }
}

TEST(PythonTokenizerTest, MultiLineStringKeepsStartAndEndLines) {
  const PyTokenizeResult r = TokenizePython("x = '''a\nb\nc''' + y\n");
  ASSERT_FALSE(r.error);
  const PyToken* s = FirstOf(r, K::kString);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->line, 1u);
  EXPECT_EQ(s->column, 5u);
  EXPECT_EQ(s->end_line, 3u);
  // The next token is on the string's last line.
  const PyToken& plus = *(s + 1);
  EXPECT_TRUE(plus.IsOp("+"));
  EXPECT_EQ(plus.line, 3u);
  EXPECT_EQ(plus.column, 6u);
}

TEST(PythonTokenizerTest, ColumnsCountBytesAndTabsAsOneByte) {
  const PyTokenizeResult r = TokenizePython("if x:\n\ty = 'h\xc3\xa9' + z\n");
  ASSERT_FALSE(r.error);
  std::vector<const PyToken*> names;
  for (const PyToken& t : r.tokens) {
    if (t.kind == K::kName) names.push_back(&t);
  }
  ASSERT_EQ(names.size(), 4u);
  EXPECT_EQ(names[2]->text, "y");
  EXPECT_EQ(names[2]->column, 2u);
  EXPECT_EQ(names[3]->text, "z");
  EXPECT_EQ(names[3]->column, 14u);  // The tab is 1 byte, the e-acute 2.
}

TEST(PythonTokenizerTest, CrLfLineEnds) {
  const PyTokenizeResult r = TokenizePython("x = 1\r\ny = (2,\r\n 3)\r\n");
  ASSERT_FALSE(r.error);
  EXPECT_EQ(Dump("x = 1\r\ny = (2,\r\n 3)\r\n"),
            "NAME(x) OP(=) NUMBER(1) NEWLINE NAME(y) OP(=) OP(() NUMBER(2) OP(,) NL NUMBER(3) OP()) NEWLINE "
            "ENDMARKER");
  const PyToken* newline = FirstOf(r, K::kNewline);
  ASSERT_NE(newline, nullptr);
  EXPECT_EQ(newline->text, "\r\n");
  const PyToken* three = nullptr;
  for (const PyToken& t : r.tokens) {
    if (t.Is(K::kNumber, "3")) three = &t;
  }
  ASSERT_NE(three, nullptr);
  EXPECT_EQ(three->line, 3u);
  EXPECT_EQ(three->column, 2u);
}

// ---- strings ---------------------------------------------------------------

TEST(PythonTokenizerTest, EveryNonFStringPrefixMakesOneStringToken) {
  for (std::string_view prefix : {"", "r", "R", "b", "B", "u", "U", "rb", "Rb", "BR", "br", "rB", "bR", "Br"}) {
    for (std::string_view body : {"'x'", "\"x\"", "'''x'''", "\"\"\"x\"\"\""}) {
      const std::string src = std::string(prefix) + std::string(body) + "\n";
      const PyToken t = Single(src);
      EXPECT_EQ(t.kind, K::kString) << src;
      EXPECT_EQ(t.text, std::string(prefix) + std::string(body)) << src;
    }
  }
}

TEST(PythonTokenizerTest, EveryFStringPrefixSplitsTheString) {
  for (std::string_view prefix : {"f", "F", "fr", "rf", "Rf", "fR", "FR", "rF"}) {
    const std::string src = std::string(prefix) + "'x'\n";
    EXPECT_EQ(Dump(src),
              "FSTRING_START(" + std::string(prefix) + "') FSTRING_MIDDLE(x) FSTRING_END(') NEWLINE ENDMARKER")
        << src;
  }
  EXPECT_EQ(Dump("f'''x'''\n"), "FSTRING_START(f''') FSTRING_MIDDLE(x) FSTRING_END(''') NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("f''\n"), "FSTRING_START(f') FSTRING_END(') NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, InvalidPrefixIsANameBeforeAString) {
  EXPECT_EQ(Dump("ub'x'\n"), "NAME(ub) STRING('x') NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("bf'x'\n"), "NAME(bf) STRING('x') NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("rr'x'\n"), "NAME(rr) STRING('x') NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("xr'x'\n"), "NAME(xr) STRING('x') NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, EscapedQuotesDoNotEndAString) {
  EXPECT_EQ(Single("'a\\'b'\n").text, "'a\\'b'");
  EXPECT_EQ(Single("\"a\\\"b\"\n").text, "\"a\\\"b\"");
  EXPECT_EQ(Single("'a\\\\'\n").text, "'a\\\\'");
  // A raw string cannot end in an odd backslash either: \' stays in it.
  EXPECT_EQ(Single("r'a\\'b'\n").text, "r'a\\'b'");
  EXPECT_EQ(Single("'''a''b'''\n").text, "'''a''b'''");
  EXPECT_EQ(Single("'''a\\'''b'''\n").text, "'''a\\'''b'''");
}

TEST(PythonTokenizerTest, BackslashNewlineContinuesASingleQuotedString) {
  const PyToken t = Single("'a\\\nb'\n");
  EXPECT_EQ(t.kind, K::kString);
  EXPECT_EQ(t.text, "'a\\\nb'");
  EXPECT_EQ(t.line, 1u);
  EXPECT_EQ(t.end_line, 2u);
}

TEST(PythonTokenizerTest, NamedUnicodeEscapes) {
  EXPECT_EQ(Single("'\\N{BULLET} and \\N{LATIN SMALL LETTER E WITH ACUTE}'\n").kind, K::kString);
  // In an f-string \N{...} is one escape, not a replacement field.
  EXPECT_EQ(Dump("f'\\N{BULLET} {x}'\n"),
            "FSTRING_START(f') FSTRING_MIDDLE(\\N{BULLET} ) OP({) NAME(x) OP(}) FSTRING_END(') NEWLINE ENDMARKER");
  // In a raw f-string it is not an escape: {BULLET} is a field.
  EXPECT_EQ(Dump("rf'\\N{BULLET}'\n"),
            "FSTRING_START(rf') FSTRING_MIDDLE(\\N) OP({) NAME(BULLET) OP(}) FSTRING_END(') NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, AdjacentStringsAreSeparateTokens) {
  EXPECT_EQ(Dump("('a'\n 'b')\n"), "OP(() STRING('a') NL STRING('b') OP()) NEWLINE ENDMARKER");
}

// ---- f-strings ---------------------------------------------------------------

TEST(PythonTokenizerTest, FStringFieldsAreCode) {
  EXPECT_EQ(Dump("f\"a{x}b\"\n"),
            "FSTRING_START(f\") FSTRING_MIDDLE(a) OP({) NAME(x) OP(}) FSTRING_MIDDLE(b) FSTRING_END(\") NEWLINE "
            "ENDMARKER");
  EXPECT_EQ(Dump("f'{torch.mm(a, b)}'\n"),
            "FSTRING_START(f') OP({) NAME(torch) OP(.) NAME(mm) OP(() NAME(a) OP(,) NAME(b) OP()) OP(}) "
            "FSTRING_END(') NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, DoubledBracesAreLiteralText) {
  EXPECT_EQ(Dump("f'{{a}}'\n"), "FSTRING_START(f') FSTRING_MIDDLE({{a}}) FSTRING_END(') NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("f'{{{x}}}'\n"),
            "FSTRING_START(f') FSTRING_MIDDLE({{) OP({) NAME(x) OP(}) FSTRING_MIDDLE(}}) FSTRING_END(') NEWLINE "
            "ENDMARKER");
}

TEST(PythonTokenizerTest, NestedFStringsWithTheSameQuotes) {
  EXPECT_EQ(Dump("f\"{f\"{x}\"}\"\n"),
            "FSTRING_START(f\") OP({) FSTRING_START(f\") OP({) NAME(x) OP(}) FSTRING_END(\") OP(}) "
            "FSTRING_END(\") NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("f'{\"a\" + 'b'}'\n"),
            "FSTRING_START(f') OP({) STRING(\"a\") OP(+) STRING('b') OP(}) FSTRING_END(') NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, ConversionAndSelfDocumentingFields) {
  EXPECT_EQ(Dump("f'{x!r}'\n"), "FSTRING_START(f') OP({) NAME(x) OP(!) NAME(r) OP(}) FSTRING_END(') NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("f'{x=}'\n"), "FSTRING_START(f') OP({) NAME(x) OP(=) OP(}) FSTRING_END(') NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("f'{x != y}'\n"),
            "FSTRING_START(f') OP({) NAME(x) OP(!=) NAME(y) OP(}) FSTRING_END(') NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, FormatSpecWithNestedField) {
  EXPECT_EQ(Dump("f'{x:>{w}}'\n"),
            "FSTRING_START(f') OP({) NAME(x) OP(:) FSTRING_MIDDLE(>) OP({) NAME(w) OP(}) OP(}) FSTRING_END(') "
            "NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("f\"{x!r:>{w}}\"\n"),
            "FSTRING_START(f\") OP({) NAME(x) OP(!) NAME(r) OP(:) FSTRING_MIDDLE(>) OP({) NAME(w) OP(}) OP(}) "
            "FSTRING_END(\") NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("f'{x:{w}.{p}f}'\n"),
            "FSTRING_START(f') OP({) NAME(x) OP(:) OP({) NAME(w) OP(}) FSTRING_MIDDLE(.) OP({) NAME(p) OP(}) "
            "FSTRING_MIDDLE(f) OP(}) FSTRING_END(') NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, ColonsInsideBracketsOfAFieldAreCode) {
  EXPECT_EQ(Dump("f'{(lambda: 1)()}'\n"),
            "FSTRING_START(f') OP({) OP(() NAME(lambda) OP(:) NUMBER(1) OP()) OP(() OP()) OP(}) FSTRING_END(') "
            "NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("f'{ {\"a\": 1}[\"a\"] }'\n"),
            "FSTRING_START(f') OP({) OP({) STRING(\"a\") OP(:) NUMBER(1) OP(}) OP([) STRING(\"a\") OP(]) OP(}) "
            "FSTRING_END(') NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, TripleQuotedFStringSpansLines) {
  const std::string_view src = "s = f'''a\n{x\n}b'''\ny\n";
  EXPECT_EQ(Dump(src),
            "NAME(s) OP(=) FSTRING_START(f''') FSTRING_MIDDLE(a\n) OP({) NAME(x) NL OP(}) FSTRING_MIDDLE(b) "
            "FSTRING_END(''') NEWLINE NAME(y) NEWLINE ENDMARKER");
  const PyTokenizeResult r = TokenizePython(src);
  const PyToken* end = FirstOf(r, K::kFStringEnd);
  ASSERT_NE(end, nullptr);
  EXPECT_EQ(end->line, 3u);
  EXPECT_EQ(end->column, 3u);
}

TEST(PythonTokenizerTest, FStringsInsideBracketsDoNotEndTheLine) {
  EXPECT_EQ(Dump("print(f'{a}',\n      f'{b}')\n"),
            "NAME(print) OP(() FSTRING_START(f') OP({) NAME(a) OP(}) FSTRING_END(') OP(,) NL FSTRING_START(f') "
            "OP({) NAME(b) OP(}) FSTRING_END(') OP()) NEWLINE ENDMARKER");
}

// ---- comments and line structure -----------------------------------------------

TEST(PythonTokenizerTest, Comments) {
  EXPECT_EQ(Dump("x = 1  # torch.mm\n"), "NAME(x) OP(=) NUMBER(1) COMMENT(# torch.mm) NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("# only\nx\n"), "COMMENT(# only) NL NAME(x) NEWLINE ENDMARKER");
  // A '#' inside a string is not a comment.
  EXPECT_EQ(Dump("s = '# no'\n"), "NAME(s) OP(=) STRING('# no') NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, NewlineVersusNlInsideBrackets) {
  EXPECT_EQ(Dump("f(1,\n  2)\n"), "NAME(f) OP(() NUMBER(1) OP(,) NL NUMBER(2) OP()) NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("x = [\n    1,  # one\n]\n"),
            "NAME(x) OP(=) OP([) NL NUMBER(1) OP(,) COMMENT(# one) NL OP(]) NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("a\n\n   \nb\n"), "NAME(a) NEWLINE NL NL NAME(b) NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, BracketsDoNotIndent) {
  EXPECT_EQ(Dump("x = (1,\n        2)\ny\n"),
            "NAME(x) OP(=) OP(() NUMBER(1) OP(,) NL NUMBER(2) OP()) NEWLINE NAME(y) NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, IndentAndDedent) {
  EXPECT_EQ(Dump("if x:\n    y\nz\n"),
            "NAME(if) NAME(x) OP(:) NEWLINE INDENT NAME(y) NEWLINE DEDENT NAME(z) NEWLINE ENDMARKER");
  EXPECT_EQ(Dump("if a:\n  if b:\n    c\n"),
            "NAME(if) NAME(a) OP(:) NEWLINE INDENT NAME(if) NAME(b) OP(:) NEWLINE INDENT NAME(c) NEWLINE DEDENT "
            "DEDENT ENDMARKER");
  EXPECT_EQ(Dump("if a:\n  if b:\n    c\nd\n"),
            "NAME(if) NAME(a) OP(:) NEWLINE INDENT NAME(if) NAME(b) OP(:) NEWLINE INDENT NAME(c) NEWLINE DEDENT "
            "DEDENT NAME(d) NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, CommentAndBlankLinesDoNotChangeIndentation) {
  EXPECT_EQ(Dump("if x:\n    y\n# c\n\n    z\n"),
            "NAME(if) NAME(x) OP(:) NEWLINE INDENT NAME(y) NEWLINE COMMENT(# c) NL NL NAME(z) NEWLINE DEDENT "
            "ENDMARKER");
}

TEST(PythonTokenizerTest, BadDedentIsAnError) {
  const std::string_view src = "if x:\n    y\n  z\n";
  const PyTokenizeResult r = TokenizePython(src);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 3u);
  EXPECT_NE(r.error->message.find("unindent"), std::string::npos) << r.error->message;
  // The tokens read before the error are kept; no ENDMARKER.
  EXPECT_EQ(Dump(src), "NAME(if) NAME(x) OP(:) NEWLINE INDENT NAME(y) NEWLINE DEDENT ERROR@3:3");
}

TEST(PythonTokenizerTest, TabsIndentToTheNextMultipleOfEight) {
  EXPECT_EQ(Dump("if x:\n\ty\n        z\n"),
            "NAME(if) NAME(x) OP(:) NEWLINE INDENT NAME(y) NEWLINE NAME(z) NEWLINE DEDENT ENDMARKER");
  EXPECT_EQ(Dump("if x:\n\tif y:\n\t\tz\n"),
            "NAME(if) NAME(x) OP(:) NEWLINE INDENT NAME(if) NAME(y) OP(:) NEWLINE INDENT NAME(z) NEWLINE DEDENT "
            "DEDENT ENDMARKER");
  // Tabs between tokens are blanks.
  EXPECT_EQ(Dump("x\t=\t1\n"), "NAME(x) OP(=) NUMBER(1) NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, LineContinuation) {
  const std::string_view src = "x = 1 + \\\n    2\n";
  EXPECT_EQ(Dump(src), "NAME(x) OP(=) NUMBER(1) OP(+) NUMBER(2) NEWLINE ENDMARKER");
  const PyTokenizeResult r = TokenizePython(src);
  const PyToken& two = r.tokens[4];
  EXPECT_EQ(two.text, "2");
  EXPECT_EQ(two.line, 2u);
  EXPECT_EQ(two.column, 5u);
  // A continued line does not indent.
  EXPECT_EQ(Dump("if a and \\\n        b:\n    c\n"),
            "NAME(if) NAME(a) NAME(and) NAME(b) OP(:) NEWLINE INDENT NAME(c) NEWLINE DEDENT ENDMARKER");
  EXPECT_EQ(Dump("x = 1 + \\\r\n    2\r\n"), "NAME(x) OP(=) NUMBER(1) OP(+) NUMBER(2) NEWLINE ENDMARKER");
}

TEST(PythonTokenizerTest, BackslashNotBeforeANewlineIsAnError) {
  EXPECT_FALSE(ErrorMessage("x = 1 \\ 2\n").empty());
  EXPECT_FALSE(ErrorMessage("x = 1 \\").empty());
}

// ---- DecodeStringToken and friends --------------------------------------------------

DecodedString Decode(std::string_view source) {
  const PyToken t = Single(source);
  auto d = DecodeStringToken(t);
  EXPECT_TRUE(d.has_value()) << source;
  return d ? *d : DecodedString{};
}

TEST(PythonTokenizerTest, DecodeEscapes) {
  EXPECT_EQ(Decode("'a\\tb\\\\c\\'d\\\"e'\n").value, "a\tb\\c'd\"e");
  EXPECT_EQ(Decode("'\\x41\\101\\u00e9\\U0001F600'\n").value, "AA\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(Decode("'\\q'\n").value, "\\q");  // Unknown escapes stay.
  const DecodedString bytes = Decode("b'\\x41\\101\\u00e9'\n");
  EXPECT_TRUE(bytes.is_bytes);
  EXPECT_EQ(bytes.value, "AA\\u00e9");  // \u is not an escape in bytes.
  EXPECT_FALSE(Decode("'x'\n").is_bytes);
}

TEST(PythonTokenizerTest, DecodeNamedEscapeIsOneCharacter) {
  const DecodedString d = Decode("'a\\N{LATIN SMALL LETTER E}b'\n");
  ASSERT_FALSE(d.value.empty());
  EXPECT_EQ(d.value.front(), 'a');
  EXPECT_EQ(d.value.back(), 'b');
  EXPECT_EQ(d.value.find('{'), std::string::npos) << d.value;
  EXPECT_EQ(d.value.find("LATIN"), std::string::npos) << d.value;
}

TEST(PythonTokenizerTest, DecodeRawStringsKeepBackslashes) {
  EXPECT_EQ(Decode("r'a\\nb'\n").value, "a\\nb");
  EXPECT_EQ(Decode("Rb'\\x41'\n").value, "\\x41");
  EXPECT_TRUE(Decode("Rb'\\x41'\n").is_bytes);
}

TEST(PythonTokenizerTest, DecodeRawTripleQuotedMapsLines) {
  // Line 1: `x = 0`; the string starts on line 2.
  const std::string_view src = "x = 0\nsrc = r'''a\\n\n  b\nc'''\n";
  const PyTokenizeResult r = TokenizePython(src);
  ASSERT_FALSE(r.error);
  const PyToken* s = FirstOf(r, K::kString);
  ASSERT_NE(s, nullptr);
  const auto d = DecodeStringToken(*s);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->value, "a\\n\n  b\nc");
  EXPECT_EQ(d->value_line_source, (std::vector<uint32_t>{2, 3, 4}));
  EXPECT_EQ(d->first_column, 11u);  // After `src = r'''`.
}

TEST(PythonTokenizerTest, DecodeEscapedNewlinesStayOnTheirSourceLine) {
  const std::string_view src = "s = \"\"\"a\\nb\nc\\nd\"\"\"\n";
  const PyTokenizeResult r = TokenizePython(src);
  ASSERT_FALSE(r.error);
  const auto d = DecodeStringToken(*FirstOf(r, K::kString));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->value, "a\nb\nc\nd");
  EXPECT_EQ(d->value_line_source, (std::vector<uint32_t>{1, 1, 2, 2}));
  EXPECT_EQ(d->first_column, 8u);
}

TEST(PythonTokenizerTest, DecodeBackslashNewlineIsNoCharacterButMovesTheSourceLine) {
  const std::string_view src = "s = '''a\\\nb\nc'''\n";
  const auto d = DecodeStringToken(*FirstOf(TokenizePython(src), K::kString));
  ASSERT_TRUE(d);
  EXPECT_EQ(d->value, "ab\nc");
  EXPECT_EQ(d->value_line_source, (std::vector<uint32_t>{1, 3}));
}

TEST(PythonTokenizerTest, DecodeOnlyDecodesStringTokens) {
  const PyTokenizeResult r = TokenizePython("x f'a'\n");
  ASSERT_FALSE(r.error);
  EXPECT_FALSE(DecodeStringToken(r.tokens[0]).has_value());  // NAME
  EXPECT_FALSE(DecodeStringToken(r.tokens[1]).has_value());  // FSTRING_START
  EXPECT_EQ(Decode("''\n").value, "");
  EXPECT_EQ(Decode("''''''\n").value, "");
}

TEST(PythonTokenizerTest, DecodeFStringMiddle) {
  const PyTokenizeResult r = TokenizePython("f'a{{b}}\\tc{x}'\n");
  ASSERT_FALSE(r.error);
  const PyToken* middle = FirstOf(r, K::kFStringMiddle);
  ASSERT_NE(middle, nullptr);
  EXPECT_EQ(middle->text, "a{{b}}\\tc");
  EXPECT_EQ(DecodeFStringMiddle(*middle, false).value, "a{b}\tc");
  EXPECT_EQ(DecodeFStringMiddle(*middle, true).value, "a{b}\\tc");
  EXPECT_EQ(DecodeFStringMiddle(*middle, false).value_line_source, (std::vector<uint32_t>{1}));
  EXPECT_EQ(DecodeFStringMiddle(*middle, false).first_column, 3u);
}

TEST(PythonTokenizerTest, StringPrefix) {
  EXPECT_EQ(StringPrefix("Rb'x'"), "rb");
  EXPECT_EQ(StringPrefix("'x'"), "");
  EXPECT_EQ(StringPrefix("F\"\"\"x\"\"\""), "f");
  EXPECT_EQ(StringPrefix("fR'"), "fr");
}

// ---- errors ----------------------------------------------------------------------

TEST(PythonTokenizerTest, UnterminatedStringIsAnErrorAtItsStart) {
  const PyTokenizeResult r = TokenizePython("x = 1\ny = 'abc\nz = 2\n");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 2u);
  EXPECT_EQ(r.error->column, 5u);
  EXPECT_EQ(r.tokens.back().kind, K::kOp);  // The `=` before it; no ENDMARKER.
}

TEST(PythonTokenizerTest, UnterminatedTripleQuotedStringIsAnErrorAtItsStart) {
  const PyTokenizeResult r = TokenizePython("x = 1\ny = \"\"\"abc\nz = 2\n");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 2u);
  EXPECT_EQ(r.error->column, 5u);
  EXPECT_NE(r.error->message.find("triple"), std::string::npos) << r.error->message;
}

TEST(PythonTokenizerTest, UnterminatedFStrings) {
  EXPECT_FALSE(ErrorMessage("f'abc\n").empty());
  EXPECT_FALSE(ErrorMessage("f'{x'\n").empty());
  EXPECT_FALSE(ErrorMessage("f'''abc\n").empty());
  EXPECT_FALSE(ErrorMessage("f'{x:{y'\n").empty());
  EXPECT_FALSE(ErrorMessage("f'a}b'\n").empty());  // A single '}' in literal text.
}

TEST(PythonTokenizerTest, StrayCharacterIsAnError) {
  const PyTokenizeResult r = TokenizePython("x = 1\ny = $z\n");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 2u);
  EXPECT_EQ(r.error->column, 5u);
  EXPECT_EQ(Dump("a ? b\n"), "NAME(a) ERROR@1:3");
  EXPECT_FALSE(ErrorMessage("a = `b`\n").empty());
  EXPECT_FALSE(ErrorMessage(std::string_view("a\0b\n", 4)).empty());
}

TEST(PythonTokenizerTest, NonAsciiIdentifierIsAnError) {
  // Fullwidth "torch": CPython folds it to torch under NFKC.
  const PyTokenizeResult r = TokenizePython("y = \xef\xbd\x94\xef\xbd\x8f\xef\xbd\x92\xef\xbd\x83\xef\xbd\x88.mm(a)\n");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 1u);
  EXPECT_EQ(r.error->column, 5u);
  // Non-ASCII text in strings and comments is fine.
  EXPECT_EQ(ErrorMessage("s = 'h\xc3\xa9llo'  # \xef\xbd\x94\n"), "");
}

TEST(PythonTokenizerTest, UnmatchedAndUnclosedBrackets) {
  EXPECT_FALSE(ErrorMessage("x = )\n").empty());
  EXPECT_FALSE(ErrorMessage("x = (1, 2\n").empty());
}

TEST(PythonTokenizerTest, NestingUpToTheLimitIsAccepted) {
  const std::string ok = "x = " + std::string(kMaxNesting, '(') + "1" + std::string(kMaxNesting, ')') + "\n";
  EXPECT_EQ(ErrorMessage(ok), "");
  const std::string deep = "x = " + std::string(kMaxNesting + 1, '(') + "1" + std::string(kMaxNesting + 1, ')') + "\n";
  const PyTokenizeResult r = TokenizePython(deep);
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->line, 1u);
}

TEST(PythonTokenizerTest, DeepFStringNestingIsAnError) {
  std::string src = "x = ";
  for (size_t i = 0; i < kMaxNesting + 1; ++i) src += "f'{";
  src += "1";
  for (size_t i = 0; i < kMaxNesting + 1; ++i) src += "}'";
  src += "\n";
  EXPECT_FALSE(ErrorMessage(src).empty());
}

TEST(PythonTokenizerTest, DeepIndentationIsAnError) {
  std::string src;
  for (size_t i = 0; i < kMaxNesting + 1; ++i) src += std::string(i, ' ') + "if x:\n";
  src += std::string(kMaxNesting + 1, ' ') + "pass\n";
  EXPECT_FALSE(ErrorMessage(src).empty());
}

TEST(PythonTokenizerTest, ErrorKeepsTheTokensReadBeforeIt) {
  const PyTokenizeResult r = TokenizePython("import torch\nx = 'open\n");
  ASSERT_TRUE(r.error);
  ASSERT_GE(r.tokens.size(), 3u);
  EXPECT_TRUE(r.tokens[0].IsName("import"));
  EXPECT_TRUE(r.tokens[1].IsName("torch"));
  for (const PyToken& t : r.tokens) EXPECT_NE(t.kind, K::kEndMarker);
}

TEST(PythonTokenizerTest, ManyTokensInLinearTime) {
  // 20,000 lines of brackets, strings and f-strings: one pass, ENDMARKER last.
  std::string src;
  for (int i = 0; i < 20000; ++i) src += "x = (f'{a!r:>{w}}' + '''b''') * [1, {2: 3}]  # c\n";
  const PyTokenizeResult r = TokenizePython(src);
  ASSERT_FALSE(r.error);
  EXPECT_EQ(r.tokens.back().kind, K::kEndMarker);
  EXPECT_EQ(r.tokens[r.tokens.size() - 2].line, 20000u);
}

}  // namespace
}  // namespace kbox::static_check
