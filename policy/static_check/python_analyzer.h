#pragma once

// The analysis behind the py.* rules, in two halves: python_model.cc reads
// the module (imports and aliases, classes, functions, the load_inline
// sources, what ModelNew.forward reaches) and python_rules.cc applies the
// rules to it. Internal to the checker; CheckPython() is the entry point.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "policy/static_check/python_rules.h"

namespace kbox::static_check::python_analysis {

constexpr size_t kMaxResolveDepth = 8;  // Alias and string-name chains.

enum class Bind { kImport, kAlias, kFunction, kClass, kExtension, kString, kTritonKernel, kOther };

struct Binding {
  Bind kind = Bind::kOther;
  std::string qual;            // kImport/kAlias: the qualified name it stands for.
  std::string_view target;     // kFunction/kClass: the module-level name.
  uint32_t value_begin = 0;    // kString/kFunction (lambda): the value's tokens.
  uint32_t value_end = 0;
  std::string instance_of;     // kOther: "torch.nn.Linear" or "class:Block" when known.
};

using Scope = std::map<std::string_view, Binding, std::less<>>;

struct Function {
  const PyStmt* stmt = nullptr;  // The def, or the assignment of a lambda.
  std::string_view name;
  std::string_view cls;          // Enclosing class; empty for module functions.
  bool lambda = false;
  bool returns_extension = false;  // `return load_inline(...)`: a loader helper.
  std::vector<std::string_view> params;  // In order; a method's first is its self (or cls).
  bool is_static = false;                // @staticmethod: no self.
  Scope locals;
  std::set<std::string_view, std::less<>> declared_global;
};

struct Class {
  const PyStmt* stmt = nullptr;
  std::string_view name;
  std::map<std::string_view, Function*, std::less<>> methods;
  Scope attrs;  // self.X = ... in any method, and class-body assignments.
  std::vector<uint32_t> base_tokens;  // First token of each base expression.
};

struct ExtensionCall {
  uint32_t open = 0;  // The '(' of the call.
  uint32_t close = 0;
  bool inline_sources = true;  // load_inline; false for load(sources=files).
  uint32_t begin = 0;  // The first token of the called expression.
};

struct Arg {
  std::string_view keyword;  // Empty for positional.
  uint32_t begin = 0, end = 0;
};

class Analyzer {
 public:
  Analyzer(const PyModule& m, const CheckInput& in, FindingSink& sink)
      : m_(m), t_(m.tokens()), in_(in), sink_(sink) {}

  PythonFacts Run() {
    ReadReference();
    CollectBody(m_.body(), nullptr, nullptr);
    ExtractSources();
    Reach();
    CollectForwardWrites();
    RuleBody(m_.body(), nullptr, nullptr);
    RuleReachedLambdas();
    EntryRules();
    return std::move(facts_);
  }

 private:
  // ---- token helpers -------------------------------------------------------
  bool IsName(uint32_t i) const { return i < t_.size() && t_[i].kind == PyTokenKind::kName; }
  bool IsOp(uint32_t i, std::string_view op) const { return i < t_.size() && t_[i].IsOp(op); }
  bool IsString(uint32_t i) const;
  void Add(std::string_view rule, uint32_t tok, std::string message);

  // Index of the bracket closing the one at `open`, or `limit`.
  uint32_t Close(uint32_t open, uint32_t limit) const;

  // Splits [a, b) at depth-0 occurrences of `sep`.
  std::vector<std::pair<uint32_t, uint32_t>> Split(uint32_t a, uint32_t b, std::string_view sep) const;

  std::vector<Arg> Args(uint32_t open, uint32_t close) const;

  // A dotted name starting at `i`: `a.b.c`; getattr(a, "b") counts as `a.b`.
  // `*end` is one past its last token.
  std::vector<std::string_view> Chain(uint32_t i, uint32_t limit, uint32_t* end) const;

  // Folds a string expression made only of literals ("mat" + "mul").
  std::optional<std::string> LiteralString(uint32_t a, uint32_t b) const;

  // ---- scopes ----------------------------------------------------------------
  const Binding* Lookup(std::string_view name, const Function* fn) const;

  // The qualified name a chain stands for ("torch.nn.functional.softmax"), or
  // empty when its head is not an import or an alias of one.
  std::string Qualify(const std::vector<std::string_view>& parts, const Function* fn) const;

  // ---- reference -------------------------------------------------------------
  void ReadReference();

  // ---- pass 1: bindings, classes, functions ----------------------------------
  void CollectBody(const std::vector<PyStmt>& body, Class* cls, Function* fn);

  Scope& ScopeOf(Class* cls, Function* fn);

  void Collect(const PyStmt& s, Class* cls, Function* fn);

  bool IsTritonDecorated(const PyStmt& def) const;
  // Records the name token `tok` as a Triton kernel of the candidate.
  void NoteTritonKernel(uint32_t tok);

  void CollectSimple(const PyStmt& s, Class* cls, Function* fn);

  static bool IsAugOpText(std::string_view s);
  bool IsAugOp(uint32_t i) const { return i < t_.size() && t_[i].kind == PyTokenKind::kOp && IsAugOpText(t_[i].text); }

  Binding ClassifyValue(uint32_t a, uint32_t b, Function* fn, const PyStmt* stmt);

  // ---- extension sources -----------------------------------------------------
  void ExtractSources();

  // Compiler flags that read host files (-include /etc/passwd, @file, -I/)
  // disclose them in diagnostics, like an #include would.
  // False when the flags are not literal text (the check is deferred).
  bool CheckFlags(const Arg& a, std::string_view key);

  // The literal text of a string expression: literals, names bound to them,
  // lists and tuples of them, '+', and .format/.replace/% (whose arguments
  // only fill in the text kbox already sees).
  // python_strings.cc: the known text of a string expression, or nullopt.
  std::optional<DecodedString> StringValue(uint32_t a, uint32_t b, size_t depth);
  std::optional<std::vector<DecodedString>> StringList(uint32_t a, uint32_t b, size_t depth);
  std::optional<DecodedString> LiteralToken(uint32_t i) const;
  std::optional<DecodedString> FString(uint32_t* i, uint32_t limit, size_t depth);

  // ---- pass 2: what ModelNew.forward reaches ----------------------------------
  void Reach();

  // Calls `fn(a, b)` for every token range of the function's own code.
  void ForEachRange(const Function* f, const std::function<void(uint32_t, uint32_t)>& fn) const;

  void ReachClass(const Class* c, std::vector<const Function*>* work);

  void ReachRefs(uint32_t a, uint32_t b, const Function* f, std::vector<const Function*>* work);

  void ReachBinding(const Binding& b, std::vector<const Function*>* work);

  // ---- pass 3: rules -----------------------------------------------------------
  Function* FunctionOf(const PyStmt& def);

  void RuleBody(const std::vector<PyStmt>& body, Class* cls, Function* fn);

  void MutableDefaults(const PyStmt& def);
  bool OnlyRaises(const std::vector<PyStmt>& body) const;
  bool OnlyPass(const std::vector<PyStmt>& body) const;

  void RuleClassHeader(const PyStmt& s, Class* c);

  void RuleSimple(const PyStmt& s, Function* fn);

  void RuleTarget(uint32_t a, uint32_t b, bool augmented, uint32_t value_begin, uint32_t value_end, Function* fn,
                  bool reached);
  void RuleReachedLambdas();
  const Function* FindMethod(const Class* c, std::string_view name, size_t depth) const;
  const Binding* FindAttr(const Class* c, std::string_view name, size_t depth) const;
  bool ReturnsExtension(uint32_t close, uint32_t limit_begin, const Function* fn) const;
  void CollectForwardWrites();

  void RuleImport(const PyStmt& s);

  static std::string_view FindRuleSummary(std::string_view rule);

  // Every name, call and operator in [a, b).
  void ScanCode(uint32_t a, uint32_t b, Function* fn, bool reached);

  void RuleChain(uint32_t i, uint32_t end, uint32_t limit, const std::vector<std::string_view>& parts,
                 Function* fn, bool reached);

  std::string_view BuiltinWhy(std::string_view name) const;

  void RuleGetattr(uint32_t i, uint32_t end, uint32_t limit, std::string_view which, Function* fn, bool reached);

  void RuleQualified(uint32_t i, const std::string& q, bool call, Function* fn, bool reached);

  // A method name at `tok` called on some receiver.
  void RuleMethod(uint32_t tok, uint32_t limit, Function* fn, bool reached, bool receiver_known);

  bool InComparison(uint32_t i) const;

  // Triton's tl.dot on fp32 inputs runs in TF32 unless asked for IEEE.
  void RuleTritonDot(uint32_t i, uint32_t open, uint32_t limit, const std::string& q);

  // ---- whose objects ---------------------------------------------------------
  // The name at the head of a chain is the method's self (or cls, or the ctx
  // of a torch.autograd.Function's static forward/backward).
  bool IsSelf(std::string_view head, const Function* fn) const;
  // `head` provably holds the candidate's own object: self, an instance of
  // its own class or of a library class it built, a literal container, its
  // own function or extension. A parameter, a loop variable or a name bound
  // to something kbox cannot place may hold a module or a class.
  bool OwnObject(std::string_view head, const Function* fn) const;
  // `self.mod.mul` where `self.mod = torch`: the qualified name it stands
  // for ("torch.mul"), or empty.
  std::string QualifyThroughSelf(const std::vector<std::string_view>& parts, const Function* fn) const;
  // Attribute stores, setattr and del on objects that are not provably the
  // candidate's own (py.patch-library).
  void RulePatchTarget(uint32_t a, uint32_t end, uint32_t b, const std::vector<std::string_view>& parts,
                       Function* fn, std::string_view verb);

  // ---- library layers ---------------------------------------------------------
  // The binding is a torch.nn layer (or a candidate class that only inherits
  // one, with no forward of its own).
  bool IsLayerBinding(const Binding& b) const;
  std::string LayerNameOf(const Binding& b) const;
  // How many leading parts of the chain name a library layer (`self.fc`: 2,
  // `layer`: 1), or 0; `*what` is its class.
  size_t LayerPrefix(const std::vector<std::string_view>& parts, const Function* fn, std::string* what) const;
  // The expression [a, b) is a library layer.
  bool IsLayerExpression(uint32_t a, uint32_t b, const Function* fn, std::string* what) const;
  // A class among the candidate's with a torch.nn layer among its bases.
  bool HasLayerBase(const Class* c, size_t depth, std::string* what) const;
  void RuleLayerCall(uint32_t i, uint32_t end, const std::vector<std::string_view>& parts, Function* fn);
  // Records that Class.attr holds library layers when [a, b) builds one.
  void NoteLayerContainer(std::string_view cls, std::string_view attr, uint32_t a, uint32_t b, const Function* fn);
  // The library layer class the candidate's container Class.attr holds, or empty.
  std::string ContainedLayer(std::string_view cls, std::string_view attr, size_t depth) const;
  // A binding the candidate made itself: its function, class, extension,
  // text, or an object it built.
  static bool OwnBinding(const Binding& b);

  // ---- whole-module verdicts --------------------------------------------------
  void EntryRules();

  bool IsEmptyBody(const std::vector<PyStmt>& body) const;

  const PyModule& m_;
  const std::vector<PyToken>& t_;
  const CheckInput& in_;
  FindingSink& sink_;
  PythonFacts facts_;
  PyModule reference_;
  std::set<std::string, std::less<>> reference_classes_;
  std::map<std::string, std::string> reference_sizes_;
  Scope globals_;
  std::vector<std::string> star_imports_;
  std::vector<std::unique_ptr<Function>> functions_;
  std::map<std::string_view, Function*, std::less<>> module_functions_;
  std::map<std::string_view, std::unique_ptr<Class>, std::less<>> classes_;
  std::map<std::string, std::string> layer_containers_;  // "Class.attr" -> the library layer it holds.
  std::map<const Function*, std::pair<uint32_t, uint32_t>> lambda_ranges_;
  std::map<uint32_t, Function*> lambda_by_value_;
  std::set<std::string_view, std::less<>> forward_self_writes_;  // self.X assigned in reached code.      // Lambda's first token -> it.
  std::map<const PyStmt*, Function*> function_by_def_;  // def statement -> it.
  std::vector<ExtensionCall> extension_calls_;
  // Names assigned by an assignment statement, by scope; those among them
  // bound to text more than once hold no text kbox can name.
  std::set<std::pair<const Scope*, std::string_view>> assigned_names_;
  std::set<std::pair<const Scope*, std::string_view>> text_rebound_;
  std::set<std::string, std::less<>> lit_store_;  // Owns folded getattr names.
  std::set<const Function*> reached_;
  Class* model_new_ = nullptr;
  const Function* forward_ = nullptr;
  bool class_alias_forward_ = false;
  bool kernel_reached_ = false;
};

}  // namespace kbox::static_check::python_analysis
