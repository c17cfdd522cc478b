#include "policy/static_check/cpp_lexer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace kbox::static_check {
namespace {

using K = CppTokenKind;

std::vector<std::string> Texts(std::string_view source) {
  std::vector<std::string> texts;
  for (const CppToken& token : LexCpp(source)) texts.emplace_back(token.text);
  return texts;
}

std::vector<std::string> Identifiers(std::string_view source) {
  std::vector<std::string> names;
  for (const CppToken& token : LexCpp(source)) {
    if (token.kind == K::kIdentifier) names.emplace_back(token.text);
  }
  return names;
}

bool HasIdentifier(std::string_view source, std::string_view name) {
  const auto names = Identifiers(source);
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::vector<K> Kinds(std::string_view source) {
  std::vector<K> kinds;
  for (const CppToken& token : LexCpp(source)) kinds.push_back(token.kind);
  return kinds;
}

using Strings = std::vector<std::string>;

// Checks the invariants every token stream must keep: each text is a
// non-empty view inside `source`, tokens are in order and do not overlap,
// and line/column agree with a count of line terminators before the token.
void ExpectWellFormed(std::string_view source) {
  const char* const begin = source.data();
  const char* const end = source.data() + source.size();
  const char* previous_end = begin;
  for (const CppToken& token : LexCpp(source)) {
    ASSERT_FALSE(token.text.empty());
    ASSERT_GE(token.text.data(), previous_end);
    ASSERT_LE(token.text.data() + token.text.size(), end);
    previous_end = token.text.data() + token.text.size();
    const auto offset = static_cast<size_t>(token.text.data() - begin);
    uint32_t line = 1;
    size_t line_begin = 0;
    for (size_t i = 0; i < offset; ++i) {
      if (source[i] == '\n' || (source[i] == '\r' && (i + 1 >= source.size() ||
                                                      source[i + 1] != '\n'))) {
        ++line;
        line_begin = i + 1;
      }
    }
    ASSERT_EQ(token.line, line);
    ASSERT_EQ(token.column, offset - line_begin + 1);
  }
}

TEST(CppLexerTest, EmptyAndBlankInputsHaveNoTokens) {
  EXPECT_TRUE(LexCpp("").empty());
  EXPECT_TRUE(LexCpp(" \t\r\n\v\f").empty());
  EXPECT_TRUE(LexCpp("// only a comment").empty());
  EXPECT_TRUE(LexCpp("/* only */ /* comments */").empty());
}

TEST(CppLexerTest, LexesIdentifiersAndKeywords) {
  const auto tokens = LexCpp("static const float* _cache9 = nullptr;");
  ASSERT_EQ(tokens.size(), 8u);
  EXPECT_EQ(tokens[0].text, "static");
  EXPECT_EQ(tokens[0].kind, K::kIdentifier);
  EXPECT_EQ(tokens[2].text, "float");
  EXPECT_EQ(tokens[3].text, "*");
  EXPECT_EQ(tokens[3].kind, K::kPunct);
  EXPECT_EQ(tokens[4].text, "_cache9");
  EXPECT_EQ(tokens[4].kind, K::kIdentifier);
  EXPECT_EQ(tokens[7].text, ";");
}

TEST(CppLexerTest, SkipsLineComments) {
  EXPECT_EQ(Texts("x // not at::matmul(a, b)\ny"), (Strings{"x", "y"}));
  EXPECT_FALSE(HasIdentifier("// cublasSgemm(\n", "cublasSgemm"));
}

TEST(CppLexerTest, SkipsBlockComments) {
  EXPECT_EQ(Texts("a /* at::matmul(\n std::thread */ b"), (Strings{"a", "b"}));
  EXPECT_EQ(Texts("a/**/b/*/ c */d"), (Strings{"a", "b", "d"}));
}

TEST(CppLexerTest, BackslashNewlineContinuesLineComment) {
  // The compiler reads the next line as part of the comment, so it is not code.
  EXPECT_EQ(Texts("// note \\\nat::matmul(a, b);\nx"), (Strings{"x"}));
  // GCC and Clang also splice when blanks follow the backslash.
  EXPECT_EQ(Texts("// note \\  \t\nat::matmul(a, b);\nx"), (Strings{"x"}));
  EXPECT_EQ(Texts("// note \\\r\nat::matmul(a, b);\r\nx"), (Strings{"x"}));
}

TEST(CppLexerTest, SplicedCommentOpenerStillOpensComment) {
  EXPECT_EQ(Texts("a /\\\n* hidden */ b /\\\n/ hidden\nc"),
            (Strings{"a", "b", "c"}));
}

TEST(CppLexerTest, LineTerminatorsEndLineComments) {
  // A lone CR ends a line for GCC, so the code after it is real code.
  EXPECT_TRUE(HasIdentifier("// c\rat::matmul(a, b);", "matmul"));
  EXPECT_TRUE(HasIdentifier("// c\r\nat::matmul(a, b);", "matmul"));
}

TEST(CppLexerTest, StringLiteralsHideNames) {
  const auto tokens = LexCpp(R"(f("at::matmul(", "a\"cublasSgemm\\"); g)");
  ASSERT_EQ(tokens.size(), 8u);
  EXPECT_EQ(tokens[2].kind, K::kString);
  EXPECT_EQ(tokens[2].text, R"("at::matmul(")");
  EXPECT_EQ(tokens[4].kind, K::kString);
  EXPECT_EQ(tokens[4].text, R"("a\"cublasSgemm\\")");
  EXPECT_EQ(tokens[7].text, "g");
  EXPECT_FALSE(HasIdentifier(R"(f("at::matmul(");)", "matmul"));
}

TEST(CppLexerTest, StringAndCharPrefixes) {
  const auto tokens =
      LexCpp(R"(u8"a" u"b" U"c" L"d" u8'e' u'f' U'g' L'h' x"i")");
  ASSERT_EQ(tokens.size(), 10u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(tokens[i].kind, K::kString) << i;
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(tokens[i].kind, K::kChar) << i;
  EXPECT_EQ(tokens[0].text, R"(u8"a")");
  EXPECT_EQ(tokens[7].text, "L'h'");
  // `x` is no prefix: an identifier and then a string.
  EXPECT_EQ(tokens[8].kind, K::kIdentifier);
  EXPECT_EQ(tokens[9].kind, K::kString);
}

TEST(CppLexerTest, OnlyExactPrefixesMakeLiterals) {
  // Near misses of u8, uR, u8R are identifiers followed by a plain literal.
  EXPECT_EQ(
      Kinds("U8\"a\" u8r\"(b)\" ur'c' uu\"d\" Ru\"e\""),
      (std::vector<K>{K::kIdentifier, K::kString, K::kIdentifier, K::kString,
                      K::kIdentifier, K::kChar, K::kIdentifier, K::kString,
                      K::kIdentifier, K::kString}));
  EXPECT_EQ(Texts("u\"(x)\" R\"(y)\""), (Strings{"u\"(x)\"", "R\"(y)\""}));
}

TEST(CppLexerTest, RawStringWithCustomDelimiterContainingQuoteParen) {
  const std::string_view source =
      "s = R\"x( at::matmul )\" still inside )x\"; y";
  const auto tokens = LexCpp(source);
  ASSERT_EQ(tokens.size(), 5u);
  EXPECT_EQ(tokens[2].kind, K::kString);
  EXPECT_EQ(tokens[2].text, "R\"x( at::matmul )\" still inside )x\"");
  EXPECT_EQ(tokens[3].text, ";");
  EXPECT_EQ(tokens[4].text, "y");
  EXPECT_FALSE(HasIdentifier(source, "matmul"));
}

TEST(CppLexerTest, RawStringPrefixesAndMultipleLines) {
  const auto tokens =
      LexCpp("u8R\"(a\nb)\" LR\"d(\\)d\" uR\"(\")\" UR\"()\" z");
  ASSERT_EQ(tokens.size(), 5u);
  EXPECT_EQ(tokens[0].text, "u8R\"(a\nb)\"");
  EXPECT_EQ(tokens[1].text, "LR\"d(\\)d\"");
  EXPECT_EQ(tokens[2].text, "uR\"(\")\"");
  EXPECT_EQ(tokens[3].text, "UR\"()\"");
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(tokens[i].kind, K::kString) << i;
  EXPECT_EQ(tokens[4].text, "z");
  EXPECT_EQ(tokens[4].line, 2u);
}

TEST(CppLexerTest, RawStringIgnoresCommentsAndSplicesInside) {
  EXPECT_EQ(Texts("R\"(/* // \\\n)\" k"), (Strings{"R\"(/* // \\\n)\"", "k"}));
}

TEST(CppLexerTest, InvalidRawDelimiterFallsBackToIdentifierAndString) {
  // A space is not a valid delimiter character; the compiler rejects this,
  // so any reading is safe, but it must not swallow the rest of the input.
  EXPECT_EQ(Texts("R\"a b(x)a b\" y"), (Strings{"R", "\"a b(x)a b\"", "y"}));
}

TEST(CppLexerTest, CharLiteralHoldingDoubleQuote) {
  const auto tokens = LexCpp("c = '\"'; at::matmul(a, b); d = '\\''; e");
  ASSERT_GE(tokens.size(), 4u);
  EXPECT_EQ(tokens[2].kind, K::kChar);
  EXPECT_EQ(tokens[2].text, "'\"'");
  EXPECT_TRUE(HasIdentifier("c = '\"'; at::matmul(a, b);", "matmul"));
  EXPECT_TRUE(HasIdentifier("d = '\\''; e", "e"));
}

TEST(CppLexerTest, CudaLaunchBrackets) {
  EXPECT_EQ(Texts("k<<<g, b, 0, s>>>(x)"),
            (Strings{"k", "<<<", "g", ",", "b", ",", "0", ",", "s", ">>>", "(",
                     "x", ")"}));
}

TEST(CppLexerTest, MultiCharPunctuatorsAreOneToken) {
  const Strings all = {"::", "->", "...", "<<<", ">>>", "<<", ">>", "<=",
                       ">=", "==", "!=",  "&&",  "||",  "++", "--", "+=",
                       "-=", "*=", "/=",  "%=",  "&=",  "|=", "^=", "##"};
  std::string source = "x";  // Keeps "##" from starting a directive.
  for (const std::string& punct : all) source += " " + punct;
  Strings expected = {"x"};
  expected.insert(expected.end(), all.begin(), all.end());
  EXPECT_EQ(Texts(source), expected);
  for (const CppToken& token : LexCpp(source)) {
    if (token.text != "x") {
      EXPECT_EQ(token.kind, K::kPunct) << token.text;
    }
  }
}

TEST(CppLexerTest, PunctuatorsTakeLongestMatch) {
  EXPECT_EQ(Texts("a<<<=b"), (Strings{"a", "<<<", "=", "b"}));
  EXPECT_EQ(Texts("a<<=b"), (Strings{"a", "<<", "=", "b"}));
  EXPECT_EQ(Texts("p->*q"), (Strings{"p", "->", "*", "q"}));
  EXPECT_EQ(Texts("a..b"), (Strings{"a", ".", ".", "b"}));
  EXPECT_EQ(Texts("a::::b"), (Strings{"a", "::", "::", "b"}));
  EXPECT_EQ(Texts("x=-1"), (Strings{"x", "=", "-", "1"}));
  EXPECT_EQ(Texts("a<=>b"), (Strings{"a", "<=", ">", "b"}));
}

TEST(CppLexerTest, QualifiedNameSplitsAroundScope) {
  const auto tokens = LexCpp("at::matmul(a, b)");
  ASSERT_GE(tokens.size(), 3u);
  EXPECT_EQ(tokens[0].text, "at");
  EXPECT_EQ(tokens[1].text, "::");
  EXPECT_EQ(tokens[1].kind, K::kPunct);
  EXPECT_EQ(tokens[2].text, "matmul");
  EXPECT_EQ(tokens[2].kind, K::kIdentifier);
  EXPECT_EQ(tokens[3].text, "(");
}

TEST(CppLexerTest, TorchTensorTypeSequence) {
  EXPECT_EQ(Texts("torch::Tensor forward(const torch::Tensor& x) {"),
            (Strings{"torch", "::", "Tensor", "forward", "(", "const", "torch",
                     "::", "Tensor", "&", "x", ")", "{"}));
}

TEST(CppLexerTest, PpNumbers) {
  const auto tokens =
      LexCpp("0x1F 1.5e-3f 1e+5 1'000 42ull .5f 0x1p-3 1.f 3E+2L");
  ASSERT_EQ(tokens.size(), 9u);
  const Strings expected = {"0x1F", "1.5e-3f", "1e+5", "1'000", "42ull",
                            ".5f",  "0x1p-3",  "1.f",  "3E+2L"};
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(tokens[i].kind, K::kNumber) << i;
    EXPECT_EQ(tokens[i].text, expected[i]);
  }
  // A sign only joins after an exponent letter.
  EXPECT_EQ(Texts("1+2 x-1"), (Strings{"1", "+", "2", "x", "-", "1"}));
}

TEST(CppLexerTest, DigitSeparatorsDoNotOpenCharLiterals) {
  const auto tokens = LexCpp("n = 1'000'000; at::matmul(a, b); m = 0xFF'FF;");
  ASSERT_GE(tokens.size(), 3u);
  EXPECT_EQ(tokens[2].text, "1'000'000");
  EXPECT_EQ(tokens[2].kind, K::kNumber);
  EXPECT_TRUE(HasIdentifier("n = 1'000'000; at::matmul(a, b);", "matmul"));
  EXPECT_TRUE(HasIdentifier("m = 0xFF'FF; cublasSgemm(h);", "cublasSgemm"));
}

TEST(CppLexerTest, PreprocessorDirectiveWithContinuation) {
  const std::string_view source =
      "#define LAUNCH(k) \\\n  k<<<1, 1>>>(at::matmul(a, b))\nint x;";
  const auto tokens = LexCpp(source);
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[0].kind, K::kPreprocessor);
  EXPECT_EQ(tokens[0].text,
            "#define LAUNCH(k) \\\n  k<<<1, 1>>>(at::matmul(a, b))");
  EXPECT_EQ(tokens[1].text, "int");
  EXPECT_EQ(tokens[1].line, 3u);
  EXPECT_EQ(tokens[1].column, 1u);
}

TEST(CppLexerTest, IncludeIsOneToken) {
  const auto tokens = LexCpp("#include \"/etc/passwd\"\n#include <cuda.h>\n");
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].kind, K::kPreprocessor);
  EXPECT_EQ(tokens[0].text, "#include \"/etc/passwd\"");
  EXPECT_EQ(tokens[1].kind, K::kPreprocessor);
  EXPECT_EQ(tokens[1].text, "#include <cuda.h>");
  EXPECT_EQ(tokens[1].line, 2u);
}

TEST(CppLexerTest, DirectiveNeedsToBeFirstOnItsLine) {
  const auto indented = LexCpp("  \t# pragma once\nx");
  ASSERT_EQ(indented.size(), 2u);
  EXPECT_EQ(indented[0].kind, K::kPreprocessor);
  EXPECT_EQ(indented[0].text, "# pragma once");
  EXPECT_EQ(indented[0].column, 4u);
  // A comment before the '#' is whitespace.
  EXPECT_EQ(Kinds("/* c */ #define A 1"), (std::vector<K>{K::kPreprocessor}));
  // Not first on the line: punctuators.
  EXPECT_EQ(Texts("a # b ## c"), (Strings{"a", "#", "b", "##", "c"}));
  // A newline inside a comment starts no line (GCC: "stray '#'").
  EXPECT_EQ(Kinds("int q; /*\n*/ #x"),
            (std::vector<K>{K::kIdentifier, K::kIdentifier, K::kPunct,
                            K::kPunct, K::kIdentifier}));
  // A splice joins lines, so the '#' is not at a line start either.
  EXPECT_EQ(Kinds("a \\\n#b"),
            (std::vector<K>{K::kIdentifier, K::kPunct, K::kIdentifier}));
}

TEST(CppLexerTest, DigraphHashStartsDirective) {
  const auto tokens = LexCpp("%:include \"/etc/passwd\"\nx %: y");
  ASSERT_EQ(tokens.size(), 5u);
  EXPECT_EQ(tokens[0].kind, K::kPreprocessor);
  EXPECT_EQ(tokens[0].text, "%:include \"/etc/passwd\"");
  EXPECT_EQ(tokens[2].text, "%");
  EXPECT_EQ(tokens[3].text, ":");
}

TEST(CppLexerTest, DirectiveKeepsCommentsInItsView) {
  const auto tokens = LexCpp("#define N 4 /* four */ // trailing\nN");
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].text, "#define N 4 /* four */ // trailing");
  EXPECT_EQ(tokens[1].text, "N");
}

TEST(CppLexerTest, BlockCommentSpanningLinesExtendsDirective) {
  // For the compiler `X` is `1 + 2`: the comment joins the lines, and what
  // follows it is still part of the directive.
  const auto tokens =
      LexCpp("#define X 1 /*\nR\"z( */ + 2\nat::matmul(a);\n// )z\"");
  ASSERT_GE(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].kind, K::kPreprocessor);
  EXPECT_EQ(tokens[0].text, "#define X 1 /*\nR\"z( */ + 2");
  EXPECT_TRUE(HasIdentifier(
      "#define X 1 /*\nR\"z( */ + 2\nat::matmul(a);\n// )z\"", "matmul"));
}

TEST(CppLexerTest, DirectiveTokensLexAsElsewhere) {
  // In a directive too, `/*` inside a raw string opens no comment, and a
  // digit separator opens no char literal (so here the `/*` does not hide
  // the code on the next lines either: the ' runs to the end of its line).
  const std::string_view raw =
      "#define X R\"(\" /* \")\"\nat::matmul(a);\n// */";
  EXPECT_TRUE(HasIdentifier(raw, "matmul"));
  EXPECT_EQ(LexCpp(raw)[0].text, "#define X R\"(\" /* \")\"");
  const std::string_view digits = "#define X 1'0' /*\nat::matmul(a);\n// */";
  EXPECT_TRUE(HasIdentifier(digits, "matmul"));
  EXPECT_EQ(LexCpp(digits)[0].text, "#define X 1'0' /*");
  // GCC ends a raw string at the end of a directive's line (and rejects it).
  const std::string_view open_raw = "#define X R\"(a\nat::matmul(b);\n)\"";
  EXPECT_TRUE(HasIdentifier(open_raw, "matmul"));
  EXPECT_EQ(LexCpp(open_raw)[0].text, "#define X R\"(a");
}

TEST(CppLexerTest, HeaderNameWithCommentOpenerOpensNoComment) {
  const std::string_view has_include =
      "#if __has_include(<x/*y>)\n#endif\nat::matmul(a);\n// */";
  EXPECT_TRUE(HasIdentifier(has_include, "matmul"));
  EXPECT_EQ(LexCpp(has_include)[0].text, "#if __has_include(<x/*y>)");
  EXPECT_TRUE(
      HasIdentifier("#include <a/*b>\nat::matmul(a);\n// */", "matmul"));
  // A backslash escapes nothing in a header-name, so here the `/*` does open
  // a comment for GCC, and the directive runs through it.
  EXPECT_EQ(Texts("#if __has_include(\"a\\\") /*\nint x;\n*/\ny"),
            (Strings{"#if __has_include(\"a\\\") /*\nint x;\n*/", "y"}));
  // Inside a string literal of a directive, `/*` opens no comment either.
  EXPECT_TRUE(
      HasIdentifier("#define S \"/*\"\nat::matmul(a);\n// */", "matmul"));
  // Elsewhere in a directive `<` is an operator and `/*` a comment.
  const auto tokens = LexCpp("#if A < B /* c\n> */ + 1\nz");
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].text, "#if A < B /* c\n> */ + 1");
}

TEST(CppLexerTest, LineAndColumnAfterMultiLineBlockComment) {
  const auto tokens = LexCpp("a /* one\n two\n three */  bb\n\tc");
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[0].line, 1u);
  EXPECT_EQ(tokens[0].column, 1u);
  EXPECT_EQ(tokens[1].text, "bb");
  EXPECT_EQ(tokens[1].line, 3u);
  EXPECT_EQ(tokens[1].column, 12u);
  EXPECT_EQ(tokens[2].line, 4u);
  EXPECT_EQ(tokens[2].column, 2u);
}

TEST(CppLexerTest, LineCountingHandlesCrLfAndLoneCr) {
  const auto tokens = LexCpp("a\r\nb\rc\n\nd");
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[1].line, 2u);
  EXPECT_EQ(tokens[2].line, 3u);
  EXPECT_EQ(tokens[3].line, 5u);
  EXPECT_EQ(tokens[3].column, 1u);
}

TEST(CppLexerTest, ColumnsCountBytes) {
  const auto tokens = LexCpp("@\xC3\xA9x @y");
  ASSERT_EQ(tokens.size(), 4u);
  EXPECT_EQ(tokens[1].text, "\xC3\xA9x");
  EXPECT_EQ(tokens[1].column, 2u);
  EXPECT_EQ(tokens[3].text, "y");
  EXPECT_EQ(tokens[3].column, 7u);
}

TEST(CppLexerTest, UnterminatedStringRunsToEndOfInput) {
  const auto tokens = LexCpp("f(\"at::matmul(a, b");
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[2].kind, K::kString);
  EXPECT_EQ(tokens[2].text, "\"at::matmul(a, b");
  EXPECT_EQ(Kinds("'x"), (std::vector<K>{K::kChar}));
  EXPECT_EQ(Texts("\"abc\\"), (Strings{"\"abc\\"}));
}

TEST(CppLexerTest, UnterminatedStringStopsAtLineEnd) {
  // An apostrophe in `#if 0` prose compiles (GCC only warns); it must not
  // hide the code that follows.
  const std::string_view source = "#if 0\ndon't\n#endif\nat::matmul(a, b);";
  EXPECT_TRUE(HasIdentifier(source, "matmul"));
  const auto tokens = LexCpp(source);
  ASSERT_GE(tokens.size(), 3u);
  EXPECT_EQ(tokens[2].kind, K::kChar);
  EXPECT_EQ(tokens[2].text, "'t");
  EXPECT_EQ(tokens[3].kind, K::kPreprocessor);
  // An escaped newline continues the string, as it does for the compiler.
  EXPECT_EQ(Texts("\"a\\\nb\" c"), (Strings{"\"a\\\nb\"", "c"}));
}

TEST(CppLexerTest, UnterminatedCommentsAndRawStringsSwallowTheRest) {
  EXPECT_EQ(Texts("a /* at::matmul(x)\n more"), (Strings{"a"}));
  EXPECT_EQ(Texts("a /"), (Strings{"a", "/"}));
  EXPECT_EQ(Texts("a R\"d( at::matmul\n)e\""),
            (Strings{"a", "R\"d( at::matmul\n)e\""}));
  EXPECT_EQ(Texts("a R\"dd"), (Strings{"a", "R\"dd"}));
  EXPECT_EQ(Texts("#define A /* x\n y"), (Strings{"#define A /* x\n y"}));
}

TEST(CppLexerTest, SpliceBetweenTokensIsWhitespace) {
  const auto tokens = LexCpp("a \\\n b\\\r\nc");
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].text, "a");
  EXPECT_EQ(tokens[1].text, "b\\\r\nc");  // One identifier, as for GCC.
}

TEST(CppLexerTest, SpliceInsideTokenKeepsOneToken) {
  const auto tokens = LexCpp("at:\\\n:mat\\\nmul<\\\n<<1>\\\n>>");
  ASSERT_EQ(tokens.size(), 6u);
  EXPECT_EQ(tokens[1].text, ":\\\n:");
  EXPECT_EQ(tokens[2].kind, K::kIdentifier);
  EXPECT_EQ(tokens[2].text, "mat\\\nmul");
  EXPECT_EQ(tokens[3].text, "<\\\n<<");
  EXPECT_EQ(tokens[5].text, ">\\\n>>");
  // A splice before a quote still makes a prefixed or raw string.
  EXPECT_EQ(Kinds("u8\\\n\"x\" R\\\n\"(y)\""),
            (std::vector<K>{K::kString, K::kString}));
}

TEST(CppLexerTest, StrayBytesAreSingleBytePunctuators) {
  const auto tokens = LexCpp(std::string_view("@`\\\0\x01x", 6));
  ASSERT_EQ(tokens.size(), 6u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(tokens[i].kind, K::kPunct) << i;
    EXPECT_EQ(tokens[i].text.size(), 1u) << i;
  }
  EXPECT_EQ(tokens[5].text, "x");
}

TEST(CppLexerTest, DollarAndUtf8BytesAreIdentifierCharacters) {
  // GCC takes both into identifiers, so neither `$R` nor `x<BOM>LR` (a BOM
  // only is skipped at the start) is a raw-string prefix: what follows the
  // quote is code.
  EXPECT_EQ(Texts("$x a$b \xC3\xA9t\xE2\x82\xAC"),
            (Strings{"$x", "a$b", "\xC3\xA9t\xE2\x82\xAC"}));
  EXPECT_EQ(Kinds("$R\"(\""), (std::vector<K>{K::kIdentifier, K::kString}));
  EXPECT_TRUE(HasIdentifier("$R\"(\"\nat::matmul(a);\n)\"", "matmul"));
  EXPECT_TRUE(
      HasIdentifier("x\xEF\xBB\xBFLR\"(\"\nat::matmul(a);\n)\"", "matmul"));
}

TEST(CppLexerTest, UdSuffixBelongsToItsLiteral) {
  EXPECT_EQ(Texts("\"s\"sv 'a'_c R\"(x)\"_r u8\"y\"z 1_km"),
            (Strings{"\"s\"sv", "'a'_c", "R\"(x)\"_r", "u8\"y\"z", "1_km"}));
  // The R after a literal is its suffix, so no raw string hides the call.
  const std::string_view source = "c = '\\''R\"(\nat::matmul(a);\n)\"";
  EXPECT_TRUE(HasIdentifier(source, "matmul"));
  EXPECT_EQ(LexCpp(source)[2].text, "'\\''R");
}

TEST(CppLexerTest, SkipsByteOrderMark) {
  const auto tokens = LexCpp("\xEF\xBB\xBF#include \"/etc/passwd\"");
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0].kind, K::kPreprocessor);
  EXPECT_EQ(tokens[0].text, "#include \"/etc/passwd\"");
}

TEST(CppLexerTest, CatchesTypicalCheats) {
  const std::string_view source = R"cc(
#include <torch/extension.h>
    // Reference: at::matmul(a, b) -- never called.
    static float* cache = nullptr;
    __global__ void k(const float* a) { /* "cublasSgemm" */
    }
    torch::Tensor forward(torch::Tensor x) {
      std::thread t([] {});
      k<<<1, 32>>>(x.data_ptr<float>());
      return at::matmul(x, x);
    }
  )cc";
  const auto names = Identifiers(source);
  EXPECT_EQ(std::count(names.begin(), names.end(), "matmul"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "cublasSgemm"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "__global__"), 1);
  EXPECT_EQ(std::count(names.begin(), names.end(), "thread"), 1);
  EXPECT_EQ(LexCpp(source)[0].text, "#include <torch/extension.h>");
}

TEST(CppLexerTest, EveryPrefixOfTrickyInputIsWellFormed) {
  const std::string tricky =
      "\xEF\xBB\xBF#include <a/*b> // c \\\n d\r\n%:define X(a) \\ \n"
      "  a##a /* m\n */ 'q\nu8R\"d()\")d\" LR\"(\\)\" u8'x' '\\'' \"\\\"\"\n"
      "k<<<g, b, 0, s>>>(x); 1'000 0x1p-3 .5f 1e+5 a...b ->*::\n"
      "R\"  (bad)\" R\"0123456789abcdefg(x)\" @$`\x80 mat\\\nmul /\\\n* c */"
      "#if __has_include( <x/*y> )\n/* open \\";
  for (size_t len = 0; len <= tricky.size(); ++len) {
    // A copy of exactly `len` bytes, so ASan flags any read past the end.
    const std::string prefix = tricky.substr(0, len);
    ExpectWellFormed(prefix);
    if (testing::Test::HasFatalFailure()) {
      FAIL() << "prefix length " << len;
    }
  }
}

TEST(CppLexerTest, RandomBytesAreWellFormed) {
  const std::string_view alphabet = "\"'\\/*#%:<>.Ru8LxX0e+-( )\n\r\t?@$\x80";
  std::mt19937 rng(12345);
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int round = 0; round < 2000; ++round) {
    std::string input(static_cast<size_t>(round % 64), ' ');
    for (char& c : input) c = alphabet[pick(rng)];
    ExpectWellFormed(input);
    if (testing::Test::HasFatalFailure()) FAIL() << "input: " << input;
  }
}

TEST(CppLexerTest, PathologicalInputsStayLinear) {
  // Each would be quadratic if a scanner restarted from a token's start.
  const std::string splices(200000, '\\');
  std::string splice_lines;
  for (int i = 0; i < 100000; ++i) splice_lines += "\\  \n";
  std::string raws;
  for (int i = 0; i < 20000; ++i) raws += "R\"abcdefghijklmnop(";
  for (const std::string& input :
       {splices, splice_lines + "x", raws, std::string(200000, '\''),
        std::string(200000, '<'), "#" + splice_lines}) {
    const auto tokens = LexCpp(input);
    EXPECT_LE(tokens.size(), input.size());
  }
}

}  // namespace
}  // namespace kbox::static_check
