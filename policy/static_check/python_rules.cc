#include "policy/static_check/python_rules.h"

#include <algorithm>

#include "policy/static_check/python_analyzer.h"
#include "policy/static_check/python_names.h"
#include "policy/static_check/rule_catalog.h"

// The rules half: every py.* rule over the model python_model.cc built.

namespace kbox::static_check::python_analysis {

void Analyzer::Add(std::string_view rule, uint32_t tok, std::string message) {
  const PyToken& t = t_[std::min<size_t>(tok, t_.size() - 1)];
  sink_.Add(rule, t.line, t.column, std::move(message));
}

Function* Analyzer::FunctionOf(const PyStmt& def) {
  auto it = function_by_def_.find(&def);
  return it == function_by_def_.end() ? nullptr : it->second;
}

void Analyzer::RuleBody(const std::vector<PyStmt>& body, Class* cls, Function* fn) {
  std::string_view clause_of;  // "try" while inside a try's clauses.
  for (const PyStmt& s : body) {
    for (const PyStmt& d : s.decorators) ScanCode(d.begin, d.end, fn, false);
    if (!s.compound) {
      RuleSimple(s, fn);
      continue;
    }
    const bool reached = fn && reached_.contains(fn);
    if (s.keyword == "try") clause_of = "try";
    else if (s.keyword != "except" && s.keyword != "else" && s.keyword != "finally") clause_of = {};
    if (reached && clause_of == "try" && (s.keyword == "except" || s.keyword == "else" || s.keyword == "finally")) {
      if (!OnlyRaises(s.body) && !(s.keyword == "finally" && OnlyPass(s.body))) {
        Add("py.try-fallback", s.begin,
            "forward's `" + std::string(s.keyword) + "` clause can return another result than the kernel's");
      }
    }
    if (s.keyword == "def" && !fn) {
      Function* f = FunctionOf(s);
      ScanCode(s.begin, s.end, nullptr, false);  // Defaults run at import.
      if (f && reached_.contains(f)) MutableDefaults(s);
      if (!cls && f && (f->name == "get_inputs" || f->name == "get_init_inputs")) {
        Add("py.defines-get-inputs", s.begin,
            "the candidate defines " + std::string(f->name) + "; inputs come from the reference only");
      }
      if (f && (f->name == "__torch_function__" || f->name == "__torch_dispatch__")) {
        Add("py.tensor-subclass", s.begin, std::string(f->name) + " intercepts tensor operations");
      }
      RuleBody(s.body, nullptr, f);
      continue;
    }
    if (s.keyword == "def") {
      const uint32_t n = IsName(s.begin + 1) ? s.begin + 1 : s.begin + 2;
      if (IsName(n) && (t_[n].text == "__torch_function__" || t_[n].text == "__torch_dispatch__")) {
        Add("py.tensor-subclass", s.begin, std::string(t_[n].text) + " intercepts tensor operations");
      }
    }
    if (s.keyword == "class" && !fn && !cls) {
      auto c = classes_.find(t_[s.begin + 1].text);
      Class* raw = c == classes_.end() ? nullptr : c->second.get();
      RuleClassHeader(s, raw);
      RuleBody(s.body, raw, nullptr);
      continue;
    }
    if (s.keyword == "class") RuleClassHeader(s, nullptr);
    if (s.keyword == "with" && reached) {
      for (uint32_t i = s.begin; i < s.end; ++i) {
        if (!IsName(i) || IsOp(i - 1, ".")) continue;
        uint32_t end = 0;
        if (Qualify(Chain(i, s.end, &end), fn) == "contextlib.suppress") {
          Add("py.try-fallback", i, "contextlib.suppress in forward swallows the kernel's errors");
        }
      }
    }
    ScanCode(s.begin, s.end, fn, reached);
    RuleBody(s.body, cls, fn);
  }
}

// `def forward(self, x, _memo={})`: the default object outlives every call.
void Analyzer::MutableDefaults(const PyStmt& def) {
  uint32_t n = def.begin + 1;
  if (t_[def.begin].IsName("async")) ++n;
  if (!IsOp(n + 1, "(")) return;
  for (const Arg& a : Args(n + 1, Close(n + 1, def.end))) {
    if (a.keyword.empty()) continue;
    const bool literal = IsOp(a.begin, "{") || IsOp(a.begin, "[");
    const bool built = IsName(a.begin) && IsOp(a.begin + 1, "(") &&
                       (t_[a.begin].text == "dict" || t_[a.begin].text == "set" || t_[a.begin].text == "list");
    if (literal || built) {
      Add("py.cross-call-cache", a.begin,
          "default argument " + std::string(a.keyword) + " is one object shared by every call: a cache");
    }
  }
}

bool Analyzer::OnlyRaises(const std::vector<PyStmt>& body) const {
  for (const PyStmt& s : body) {
    if (s.compound || !t_[s.begin].IsName("raise")) return false;
  }
  return !body.empty();
}

bool Analyzer::OnlyPass(const std::vector<PyStmt>& body) const {
  for (const PyStmt& s : body) {
    if (s.compound || !t_[s.begin].IsName("pass")) return false;
  }
  return true;
}

void Analyzer::RuleClassHeader(const PyStmt& s, Class* c) {
  ScanCode(s.begin, s.end, nullptr, false);
  if (!IsOp(s.begin + 2, "(")) return;
  const uint32_t close = Close(s.begin + 2, s.end);
  for (const Arg& a : Args(s.begin + 2, close)) {
    if (!a.keyword.empty() || !IsName(a.begin)) continue;
    uint32_t end = 0;
    const auto parts = Chain(a.begin, a.end, &end);
    const std::string q = Qualify(parts, nullptr);
    if (q == "torch.Tensor" || q == "torch._C._TensorBase" || q == "torch._C.TensorBase" ||
        q == "torch.nn.Parameter" || q == "torch.nn.parameter.Parameter") {
      Add("py.tensor-subclass", a.begin, "class subclasses " + q + ": a tensor that can defer or fake its values");
    }
    if (parts.size() == 1 && !Lookup(parts[0], nullptr) && reference_classes_.contains(std::string(parts[0]))) {
      Add("py.reference-reuse", a.begin,
          "class subclasses the reference's " + std::string(parts[0]) + " instead of implementing it");
    } else if (parts.size() == 1 && !Lookup(parts[0], nullptr) && c && c->name == "ModelNew") {
      Add("py.reference-reuse", a.begin,
          "ModelNew's base " + std::string(parts[0]) + " is defined nowhere in the candidate");
    }
  }
}

void Analyzer::RuleSimple(const PyStmt& s, Function* fn) {
  const bool reached = fn && reached_.contains(fn);
  const PyToken& first = t_[s.begin];
  if (first.IsName("import") || first.IsName("from")) {
    RuleImport(s);
    return;
  }
  if (first.IsName("del")) {
    for (uint32_t i = s.begin + 1; i < s.end; ++i) {
      if (!IsName(i) || IsOp(i - 1, ".")) continue;
      uint32_t end = 0;
      const auto parts = Chain(i, s.end, &end);
      if (parts.size() > 1 && !Qualify(parts, fn).empty()) {
        Add("py.patch-library", i, "deletes " + Qualify(parts, fn) + " from a module kbox relies on");
      } else if (parts.size() > 1 || IsOp(end, "(") || IsOp(end, "[")) {
        uint32_t stop = end;
        int depth = 0;
        while (stop < s.end && (depth > 0 || !IsOp(stop, ","))) {
          if (IsOp(stop, "(") || IsOp(stop, "[") || IsOp(stop, "{")) ++depth;
          if (IsOp(stop, ")") || IsOp(stop, "]") || IsOp(stop, "}")) --depth;
          ++stop;
        }
        RulePatchTarget(i, end, stop, parts, fn, "deletes");
        end = stop;
      }
      i = end;
    }
  }
  // Assignment targets.
  auto eqs = Split(s.begin, s.end, "=");
  uint32_t aug = 0;
  for (uint32_t i = s.begin; i < s.end && !aug; ++i) {
    if (IsAugOp(i)) aug = i;
  }
  std::vector<std::pair<uint32_t, uint32_t>> targets;
  if (aug) {
    targets.emplace_back(s.begin, aug);
  } else {
    for (size_t k = 0; k + 1 < eqs.size(); ++k) {
      auto [ta, tb] = eqs[k];
      tb = Split(ta, tb, ":").front().second;
      for (auto t : Split(ta, tb, ",")) targets.push_back(t);
    }
  }
  const uint32_t value_begin = aug ? aug + 1 : eqs.back().first;
  for (auto [a, b] : targets) RuleTarget(a, b, aug != 0, value_begin, s.end, fn, reached);
  // `return self.out`, where forward stored self.out on an earlier call.
  if (reached && first.IsName("return") && s.end == s.begin + 4 && t_[s.begin + 1].IsName("self") &&
      IsOp(s.begin + 2, ".") && forward_self_writes_.contains(t_[s.begin + 3].text)) {
    Add("py.cross-call-cache", s.begin + 1,
        "forward returns self." + std::string(t_[s.begin + 3].text) + ", which it stored on an earlier call");
  }
  ScanCode(s.begin, s.end, fn, reached);
  if (reached && aug && IsOp(aug, "@=")) Add("py.matmul-operator", aug, "`@=` in forward is a library matmul");
}

void Analyzer::RuleTarget(uint32_t a, uint32_t b, bool augmented, uint32_t value_begin, uint32_t value_end,
                          Function* fn, bool reached) {
  while (a < b && (IsOp(a, "(") || IsOp(a, "[") || IsOp(a, "*"))) ++a;
  if (!IsName(a)) return;
  uint32_t end = 0;
  const auto parts = Chain(a, b, &end);
  const bool subscript = IsOp(end, "[");
  if (parts.size() > 1) {
    const std::string q = Qualify(parts, fn);
    const Binding* head = Lookup(parts[0], fn);
    if (!q.empty()) {
      Add("py.patch-library", a, "assigns to " + q + ": patching a module the evaluator relies on");
      if (in_.precision == TaskPrecision::kFp32 && IsLowPrecisionName(q)) {
        Add("py.precision-downgrade", a, q + " lowers fp32 precision in an fp32 task");
      }
    } else if (head && head->kind == Bind::kClass) {
      Add("py.dynamic-code", a, "rebinds " + std::string(parts[0]) + "." + std::string(parts[1]) +
                                    " after the class is defined");
    } else {
      RulePatchTarget(a, end, b, parts, fn, "assigns to");
    }
  } else if (IsOp(end, "(") || IsOp(end, "[")) {
    RulePatchTarget(a, end, b, parts, fn, "assigns to");
  }
  // State carried between forward calls.
  if (!reached) return;
  const bool on_self = parts[0] == "self" && parts.size() >= 2;
  const Binding* head = Lookup(parts[0], fn);
  const bool local = fn && !fn->declared_global.contains(parts[0]) && fn->locals.contains(parts[0]);
  const bool global = !on_self && !local && head != nullptr;
  // `self.calls = self.calls + 1` counts as much as `self.calls += 1`.
  bool reads_itself = false;
  if (!augmented && !subscript && (on_self || global || (fn && fn->declared_global.contains(parts[0])))) {
    for (uint32_t k = value_begin; k + parts.size() * 2 - 1 <= value_end && !reads_itself; ++k) {
      if (IsOp(k - 1, ".") || !IsName(k)) continue;
      uint32_t e = 0;
      reads_itself = Chain(k, value_end, &e) == parts;
    }
  }
  if ((augmented || reads_itself) && (on_self || global || (fn && fn->declared_global.contains(parts[0])))) {
    Add("py.call-counter", a, "forward updates " + std::string(parts[0]) +
                                  (parts.size() > 1 ? "." + std::string(parts[1]) : "") +
                                  " on every call: behaviour can depend on the call count");
  } else if (subscript && (on_self || global)) {
    Add("py.cross-call-cache", a, "forward stores into " + std::string(parts[0]) +
                                      (on_self ? "." + std::string(parts[1]) : "") + ", which outlives the call");
  } else if (on_self || (fn && fn->declared_global.contains(parts[0]))) {
    Add("py.forward-stores-state", a, "forward assigns " + std::string(parts[0]) +
                                          (on_self ? "." + std::string(parts[1]) : "") + " across calls");
  }
}

void Analyzer::RuleImport(const PyStmt& s) {
  std::vector<std::pair<std::string, uint32_t>> modules;
  if (t_[s.begin].IsName("import")) {
    for (auto [a, b] : Split(s.begin + 1, s.end, ",")) {
      std::string mod;
      for (uint32_t i = a; i < b && !t_[i].IsName("as"); ++i) mod += t_[i].text;
      modules.emplace_back(mod, a);
    }
  } else {
    std::string mod;
    uint32_t i = s.begin + 1;
    for (; i < s.end && !t_[i].IsName("import"); ++i) mod += t_[i].text;
    modules.emplace_back(mod, s.begin + 1);
    for (auto [x, y] : Split(i + 1, s.end, ",")) {
      uint32_t n = x;
      if (IsOp(n, "(")) ++n;
      if (IsName(n)) modules.emplace_back(mod + "." + std::string(t_[n].text), n);
    }
  }
  for (const auto& [mod, tok] : modules) {
    if (mod == "reference" || mod.ends_with(".reference")) {
      Add("py.reference-reuse", tok, "imports the reference module");
    }
    std::string_view rule = RuleForImport(mod);
    if (rule.empty()) rule = RuleForQualifiedName(mod);
    if (!rule.empty()) Add(rule, tok, "imports " + mod + " (" + std::string(FindRuleSummary(rule)) + ")");
    if (in_.precision == TaskPrecision::kFp32 && IsLowPrecisionName(mod)) {
      Add("py.precision-downgrade", tok, "imports " + mod + " in an fp32 task");
    }
  }
}

void Analyzer::ScanCode(uint32_t a, uint32_t b, Function* fn, bool reached) {
  for (uint32_t i = a; i < b; ++i) {
    const PyToken& t = t_[i];
    if (t.kind == PyTokenKind::kOp) {
      if (reached && (t.text == "@" || t.text == "@=")) {
        Add("py.matmul-operator", i, "the @ operator in forward is a library matmul");
      }
      // A method called on an expression: `(a * b).sum()`.
      if (t.text == "." && i > a && (IsOp(i - 1, ")") || IsOp(i - 1, "]")) && IsName(i + 1)) {
        RuleMethod(i + 1, b, fn, reached, /*receiver_known=*/ReturnsExtension(i - 1, a, fn));
        if (reached && IsOp(i - 1, ")") && IsLayerCallName(t_[i + 1].text)) {
          // type(self.fc).forward(self.fc, x); super().forward(x) in a subclass of a layer.
          uint32_t open = i - 1;
          for (int depth = 0; open-- > a;) {
            if (IsOp(open, ")")) ++depth;
            if (IsOp(open, "(") && depth-- == 0) break;
          }
          std::string what;
          if (open > a && open < i && IsName(open - 1) && !IsOp(open - 2, ".") && !Lookup(t_[open - 1].text, fn)) {
            const std::string_view callee = t_[open - 1].text;
            const auto args = Args(open, i - 1);
            if (callee == "type" && args.size() == 1 && IsLayerExpression(args[0].begin, args[0].end, fn, &what)) {
              Add("py.library-module-in-forward", i + 1,
                  "forward calls the " + what + " layer's " + std::string(t_[i + 1].text) +
                      " through its type: the library computes it");
            }
            if (callee == "super" && fn && !fn->cls.empty()) {
              auto c = classes_.find(fn->cls);
              if (c != classes_.end() && HasLayerBase(c->second.get(), 0, &what)) {
                Add("py.library-module-in-forward", i + 1,
                    "super()." + std::string(t_[i + 1].text) + " runs the inherited " + what +
                        ": the library computes it");
              }
            }
          }
        }
      }
      continue;
    }
    if (t.kind != PyTokenKind::kName || IsOp(i - 1, ".")) continue;
    if (t.text == "lambda" || t.text == "self" || t.text == "in" || t.text == "not") {
      if (t.text != "self") continue;
    }
    uint32_t end = 0;
    const auto parts = Chain(i, b, &end);
    RuleChain(i, end, b, parts, fn, reached);
    // Methods further along the chain (`x.view(...).softmax()` is handled
    // by the expression-receiver case above).
  }
}

void Analyzer::RuleChain(uint32_t i, uint32_t end, uint32_t limit, const std::vector<std::string_view>& parts,
               Function* fn, bool reached) {
  const bool call = IsOp(end, "(");
  const Binding* head = Lookup(parts[0], fn);
  if (parts[0] == "__builtins__" || parts[0] == "__loader__" || parts[0] == "__spec__") {
    Add("py.evaluator-access", i, std::string(parts[0]) + " reaches into the interpreter");
  }
  // Triton's tl.dot(..., allow_tf32=True / input_precision="tf32").
  if (in_.precision == TaskPrecision::kFp32 && parts.size() == 1 && IsOp(end, "=") &&
      ((parts[0] == "allow_tf32" && t_[end + 1].IsName("True")) ||
       (parts[0] == "input_precision" && IsString(end + 1) && t_[end + 1].text.find("tf32") != std::string_view::npos))) {
    Add("py.precision-downgrade", i, std::string(parts[0]) + " asks for TF32 in an fp32 task");
  }
  // Builtins the candidate has not rebound.
  if (!head && parts.size() == 1 && call) {
    std::string_view rule = RuleForBuiltinCall(parts[0]);
    if (parts[0] == "getattr" || parts[0] == "setattr" || parts[0] == "delattr") {
      RuleGetattr(i, end, limit, parts[0], fn, reached);
    } else if (!rule.empty()) {
      Add(rule, i, std::string(parts[0]) + "() " + std::string(BuiltinWhy(parts[0])));
    }
  }
  if (!head && parts.size() == 1 && reference_classes_.contains(std::string(parts[0])) &&
      !classes_.contains(parts[0])) {
    Add("py.reference-reuse", i, "names the reference's " + std::string(parts[0]));
  }
  std::string q = Qualify(parts, fn);
  if (!q.empty()) RuleQualified(i, q, call, fn, reached);
  if (!q.empty() && call && in_.precision == TaskPrecision::kFp32) RuleTritonDot(i, end, limit, q);
  if (reached) RuleLayerCall(i, end, parts, fn);
  // x.__setattr__(name, v), object.__setattr__(x, name, v): setattr spelled as a method.
  if (call && parts.size() >= 2 && (parts.back() == "__setattr__" || parts.back() == "__delattr__")) {
    const std::vector<std::string_view> receiver(parts.begin(), parts.end() - 1);
    const bool builtin_type = receiver.size() == 1 && !head && (receiver[0] == "object" || receiver[0] == "type");
    if (builtin_type) {
      const auto args = Args(end, Close(end, limit));
      if (!args.empty() && IsName(args[0].begin)) {
        uint32_t e = 0;
        auto target = Chain(args[0].begin, args[0].end, &e);
        target.push_back("*");
        RulePatchTarget(args[0].begin, e, args[0].end, target, fn, "sets an attribute of");
      } else {
        Add("py.patch-library", i, std::string(parts.back()) + " on an object kbox cannot place as the candidate's own");
      }
    } else {
      std::vector<std::string_view> store = receiver;
      store.push_back("*");
      RulePatchTarget(i, end - 2, end - 2, store, fn, "sets an attribute of");
    }
  }
  // Attributes anywhere in the chain.
  for (size_t k = 1; k < parts.size(); ++k) {
    if (IsIntrospectionAttribute(parts[k])) {
      Add("py.evaluator-access", i, "." + std::string(parts[k]) + " reaches into frames or interpreter state");
    }
    if (parts[k] == "_version" || parts[k] == "_cdata") {
      Add("py.identity-key", i, "." + std::string(parts[k]) + " identifies a tensor object, not its values");
    }
  }
  if (parts.size() >= 2 && call && q.empty()) {
    const bool receiver_known = head && (head->kind == Bind::kExtension || head->kind == Bind::kClass ||
                                         head->kind == Bind::kFunction || head->kind == Bind::kImport ||
                                         head->kind == Bind::kString ||
                                         (parts.size() == 2 && head->instance_of == "container"));
    bool self_ext = false;
    if (parts[0] == "self" && fn && !fn->cls.empty()) {
      if (auto c = classes_.find(fn->cls); c != classes_.end()) {
        if (const Binding* at = FindAttr(c->second.get(), parts[1], 0)) self_ext = at->kind == Bind::kExtension;
      }
    }
    // The last part is a method called on the chain.
    const uint32_t method_tok = end - 1;
    if (!(self_ext && parts.size() == 3) && !(parts[0] == "self" && parts.size() == 2)) {
      RuleMethod(method_tok, limit, fn, reached, receiver_known || self_ext);
    }
  }
  if (reached && parts.size() >= 2 && !call && q.empty() && IsComputeMethod(parts.back()) &&
      !(head && (head->kind == Bind::kExtension || head->kind == Bind::kImport))) {
    Add("py.tensor-method-compute", i, "forward takes ." + std::string(parts.back()) + " of a tensor as a value");
  }
  if (parts.size() >= 2 && !call && IsOp(end, "(") == false && parts.back() == "data_ptr") {
    // A bound method taken without a call: `key = x.data_ptr`.
    Add("py.identity-key", i, "data_ptr identifies a tensor's storage, not its values");
  }
}

std::string_view Analyzer::BuiltinWhy(std::string_view name) const {
  if (name == "open") return "opens a file";
  if (name == "id") return "identifies an object, not its values: a key for replaying results";
  if (name == "globals" || name == "locals" || name == "vars") return "reads the interpreter's namespaces";
  if (name == "breakpoint") return "enters the debugger";
  return "runs code kbox never saw";
}

void Analyzer::RuleGetattr(uint32_t i, uint32_t end, uint32_t limit, std::string_view which, Function* fn, bool reached) {
  const uint32_t close = Close(end, limit);
  const auto args = Args(end, close);
  if (args.size() < 2) return;
  const Arg& name = args[1];
  const bool plain_literal = name.end == name.begin + 1 && t_[name.begin].kind == PyTokenKind::kString;
  auto folded = LiteralString(name.begin, name.end);
  if (!plain_literal) {
    std::string what = std::string(which) + " with a computed attribute name";
    if (folded) what += " (\"" + folded->substr(0, 40) + "\")";
    Add("py.dynamic-code", i, what + " hides which attribute is used");
  }
  if (which != "getattr") {
    // setattr/delattr change the object in the first argument: patching
    // unless it is provably the candidate's own.
    if (!IsName(args[0].begin)) {
      Add("py.patch-library", i, std::string(which) + " on an object kbox cannot place as the candidate's own");
    } else {
      uint32_t e = 0;
      const auto target = Chain(args[0].begin, args[0].end, &e);
      const std::string tq = Qualify(target, fn);
      if (!tq.empty() && !folded) {
        Add("py.patch-library", i, std::string(which) + " on " + tq + ": patching a module the evaluator relies on");
      } else if (tq.empty()) {
        std::vector<std::string_view> store = target;
        store.push_back(folded ? std::string_view(*lit_store_.insert(*folded).first) : std::string_view("*"));
        RulePatchTarget(args[0].begin, e, args[0].end, store, fn,
                        which == "setattr" ? "sets an attribute of" : "deletes an attribute of");
      }
    }
  }
  if (!folded || !IsName(args[0].begin)) return;
  uint32_t e = 0;
  auto parts = Chain(args[0].begin, args[0].end, &e);
  if (e != args[0].end) return;
  parts.push_back(*lit_store_.insert(*folded).first);
  if (reached && which == "getattr") RuleLayerCall(i, close + 1, parts, fn);
  const std::string q = Qualify(parts, fn);
  if (which != "getattr" && parts.size() >= 2 && !q.empty()) {
    Add("py.patch-library", i, std::string(which) + " on " + q + ": patching a module the evaluator relies on");
  }
  if (!q.empty()) RuleQualified(i, q, true, fn, reached);
}

void Analyzer::RuleQualified(uint32_t i, const std::string& q, bool call, Function* fn, bool reached) {
  (void)fn;
  std::string_view rule = RuleForQualifiedName(q);
  if (!rule.empty()) Add(rule, i, q + ": " + std::string(FindRuleSummary(rule)));
  if (in_.precision == TaskPrecision::kFp32 && IsLowPrecisionName(q) && !InComparison(i)) {
    Add("py.precision-downgrade", i, q + " in an fp32 task computes in lower precision");
  }
  if (q == "torch.Tensor._make_subclass" || q.ends_with("._make_subclass")) {
    Add("py.tensor-subclass", i, "_make_subclass builds a tensor of a custom subclass");
  }
  if (!call && IsLibraryCompute(q) && !InComparison(i)) {
    // Stored in a dict, passed to map() or aliased, it can be called from
    // forward without forward naming it.
    Add("py.library-compute-in-forward", i, q + " is taken as a value: forward can call it indirectly");
  }
  if (!reached || !call) return;
  if (IsLibraryCompute(q)) {
    Add("py.library-compute-in-forward", i, "forward calls " + q + ": the library does the work, not a kernel");
  } else if (IsLibraryLayer(q)) {
    Add("py.library-module-in-forward", i, "forward builds and calls " + q + ": the library does the work");
  }
}

void Analyzer::RuleMethod(uint32_t tok, uint32_t limit, Function* fn, bool reached, bool receiver_known) {
  (void)fn;
  const std::string_view name = t_[tok].text;
  const bool call = IsOp(tok + 1, "(");
  if (!call) return;
  if (name == "data_ptr" || name == "untyped_storage" || name == "storage") {
    const uint32_t close = Close(tok + 1, limit);
    if (!(name == "data_ptr" && IsOp(close + 1, "%"))) {  // `% 16`: an alignment check.
      Add("py.identity-key", tok, name == "data_ptr" ? "data_ptr() identifies storage, not values: a replay key"
                                                     : std::string(name) + "() exposes storage identity");
    }
  }
  if (name == "_make_subclass" || name == "as_subclass" || name == "_make_wrapper_subclass") {
    Add("py.tensor-subclass", tok, std::string(name) + " makes a tensor of a custom subclass");
  }
  if (in_.precision == TaskPrecision::kFp32 && (name == "half" || name == "bfloat16")) {
    Add("py.precision-downgrade", tok, "." + std::string(name) + "() in an fp32 task");
  }
  if (!reached) return;
  if (!receiver_known && IsComputeMethod(name)) {
    Add("py.tensor-method-compute", tok, "forward calls ." + std::string(name) + "() on a tensor: library compute");
  }
  if (name == "append" || name == "update" || name == "setdefault" || name == "extend" || name == "insert" ||
      name == "add" || name == "__setitem__") {
    // Mutating a container that outlives the call: `cache.update(...)`.
    uint32_t h = tok;
    while (h >= 2 && IsOp(h - 1, ".") && IsName(h - 2)) h -= 2;
    if (IsName(h) && !IsOp(h - 1, ".") && h < tok) {
      const std::string_view head = t_[h].text;
      const bool local = fn && fn->locals.contains(head) && !fn->declared_global.contains(head);
      const Binding* bnd = local ? nullptr : Lookup(head, fn);
      bool self_state = head == "self";
      if (self_state && IsName(h + 2) && fn && !fn->cls.empty()) {
        if (auto c = classes_.find(fn->cls); c != classes_.end()) {
          auto at = c->second->attrs.find(t_[h + 2].text);
          self_state = at == c->second->attrs.end() || at->second.kind == Bind::kOther;
        }
      }
      if (self_state || (bnd && bnd->kind == Bind::kOther)) {
        Add("py.cross-call-cache", tok, "forward adds to " + std::string(head) + "'s container, which outlives the call");
      }
    }
  }
}

bool Analyzer::InComparison(uint32_t i) const {
  auto cmp = [&](uint32_t k) {
    return k < t_.size() && (t_[k].IsOp("==") || t_[k].IsOp("!=") || t_[k].IsName("is") || t_[k].IsName("in"));
  };
  uint32_t end = i;
  while (end + 2 < t_.size() && IsOp(end + 1, ".") && IsName(end + 2)) end += 2;
  if ((i > 0 && cmp(i - 1)) || cmp(end + 1) || (i > 1 && t_[i - 1].IsName("not") && t_[i - 2].IsName("is"))) {
    return true;
  }
  // An element of a tuple/list/set compared against: `x.dtype in (torch.half, ...)`.
  int depth = 0;
  for (uint32_t k = i; k-- > 0;) {
    if (t_[k].kind != PyTokenKind::kOp) continue;
    const std::string_view o = t_[k].text;
    if (o == ")" || o == "]" || o == "}") ++depth;
    if (o == "(" || o == "[" || o == "{") {
      if (depth-- == 0) return k > 0 && cmp(k - 1);
    }
    if (depth == 0 && o != "," && o != "." && o != "(" && o != "[" && o != "{") return false;
  }
  return false;
}

// True when the `)` at `close` ends a call of a loader helper
// (`get_ext().relu(x)`): the receiver is the extension.
bool Analyzer::ReturnsExtension(uint32_t close, uint32_t limit_begin, const Function* fn) const {
  if (!IsOp(close, ")")) return false;
  int depth = 0;
  for (uint32_t k = close + 1; k-- > limit_begin;) {
    if (IsOp(k, ")")) ++depth;
    if (IsOp(k, "(") && --depth == 0) {
      if (k == 0 || !IsName(k - 1) || IsOp(k - 2, ".")) return false;
      const Binding* b = Lookup(t_[k - 1].text, fn);
      if (!b || b->kind != Bind::kFunction) return false;
      auto m = module_functions_.find(b->target);
      return m != module_functions_.end() && m->second->returns_extension;
    }
  }
  return false;
}

// Module-level lambdas reached from forward are forward's code too.
void Analyzer::RuleReachedLambdas() {
  for (const auto& [f, range] : lambda_ranges_) {
    if (!reached_.contains(f)) continue;
    uint32_t body = range.first;
    while (body < range.second && !IsOp(body, ":")) ++body;
    ScanCode(body + 1, range.second, const_cast<Function*>(f), true);
  }
}

// self.X assigned anywhere in code forward reaches.
void Analyzer::CollectForwardWrites() {
  for (const Function* f : reached_) {
    ForEachRange(f, [&](uint32_t a, uint32_t b) {
      for (uint32_t k = a; k + 3 < b; ++k) {
        if (t_[k].IsName("self") && !IsOp(k - 1, ".") && IsOp(k + 1, ".") && IsName(k + 2) &&
            (IsOp(k + 3, "=") || IsAugOp(k + 3))) {
          forward_self_writes_.insert(t_[k + 2].text);
        }
      }
    });
  }
}

void Analyzer::RuleTritonDot(uint32_t i, uint32_t open, uint32_t limit, const std::string& q) {
  if (!q.starts_with("triton.language.")) return;
  const std::string_view last = std::string_view(q).substr(q.rfind('.') + 1);
  if (last == "dot_scaled") {
    Add("py.precision-downgrade", i, q + " multiplies fp8/fp4 operands in an fp32 task");
    return;
  }
  if (last != "dot") return;
  // tl.dot(input, other, acc, input_precision, allow_tf32, ...)
  bool ieee = false;
  const auto args = Args(open, Close(open, limit));
  for (size_t k = 0; k < args.size(); ++k) {
    const Arg& a = args[k];
    const std::string_view key = !a.keyword.empty() ? a.keyword : k == 3 ? "input_precision" : k == 4 ? "allow_tf32" : "";
    if (key == "input_precision" && a.end == a.begin + 1 && IsString(a.begin)) {
      auto v = LiteralString(a.begin, a.end);
      if (v && *v == "ieee") ieee = true;
    }
    if (key == "allow_tf32" && a.end == a.begin + 1 && t_[a.begin].IsName("False")) ieee = true;
  }
  if (!ieee) {
    Add("py.precision-downgrade", i,
        q + " without input_precision=\"ieee\" multiplies fp32 inputs in TF32 on tensor cores: an fp32 task in "
            "lower precision");
  }
}

bool Analyzer::IsSelf(std::string_view head, const Function* fn) const {
  if (!fn || fn->params.empty() || fn->params[0] != head) return false;
  if (fn->is_static) {
    // torch.autograd.Function's static forward/backward get their own ctx.
    auto c = classes_.find(fn->cls);
    if (c == classes_.end()) return false;
    for (uint32_t b : c->second->base_tokens) {
      if (!IsName(b)) continue;
      uint32_t end = 0;
      const std::string q = Qualify(Chain(b, static_cast<uint32_t>(t_.size()), &end), nullptr);
      if (q == "torch.autograd.Function" || q.starts_with("torch.autograd.function.")) return true;
    }
    return false;
  }
  // A module-level function's first parameter is whatever its caller passes,
  // whatever it is called (`def route(self, hook): self.mul = hook`).
  return !fn->cls.empty();
}

bool Analyzer::OwnObject(std::string_view head, const Function* fn) const {
  if (IsSelf(head, fn)) return true;
  const Binding* b = Lookup(head, fn);
  if (!b) return false;  // Not bound by the candidate: a builtin, a star import, an unknown.
  return OwnBinding(*b);
}

bool Analyzer::OwnBinding(const Binding& b) {
  switch (b.kind) {
    case Bind::kFunction:
    case Bind::kClass:
    case Bind::kExtension:
    case Bind::kTritonKernel:
    case Bind::kString: return true;
    case Bind::kImport:
    case Bind::kAlias: return false;
    case Bind::kOther: break;
  }
  // An instance of its own class, a literal container, or what a library
  // constructor or function it named built (nn.Linear(...), torch.empty(...)).
  return !b.instance_of.empty();
}

std::string Analyzer::ContainedLayer(std::string_view cls, std::string_view attr, size_t depth) const {
  if (auto it = layer_containers_.find(std::string(cls) + "." + std::string(attr)); it != layer_containers_.end()) {
    return it->second;
  }
  auto c = classes_.find(cls);
  if (c == classes_.end() || depth >= kMaxResolveDepth) return {};
  for (uint32_t b : c->second->base_tokens) {
    if (!IsName(b)) continue;
    if (auto base = classes_.find(t_[b].text); base != classes_.end() && base->second.get() != c->second.get()) {
      if (std::string held = ContainedLayer(base->first, attr, depth + 1); !held.empty()) return held;
    }
  }
  return {};
}

std::string Analyzer::QualifyThroughSelf(const std::vector<std::string_view>& parts, const Function* fn) const {
  if (parts.size() < 2 || !IsSelf(parts[0], fn) || fn->cls.empty()) return {};
  auto c = classes_.find(fn->cls);
  if (c == classes_.end()) return {};
  const Binding* at = FindAttr(c->second.get(), parts[1], 0);
  if (!at || (at->kind != Bind::kImport && at->kind != Bind::kAlias)) return {};
  std::string q = at->qual;
  for (size_t k = 2; k < parts.size(); ++k) (q += '.') += parts[k];
  return q;
}

void Analyzer::RulePatchTarget(uint32_t a, uint32_t end, uint32_t b, const std::vector<std::string_view>& parts,
                               Function* fn, std::string_view verb) {
  std::string shown;
  for (auto p : parts) shown += (shown.empty() ? "" : ".") + std::string(p);
  // An attribute of what a call or a subscript gives: `type(x).__eq__ = f`,
  // `mods[0].mul = f`. Only self's own elements and new instances of the
  // candidate's classes are provably its own.
  bool expression = false, call = false;
  for (uint32_t k = end; k < b; ++k) {
    if (IsOp(k, "(")) call = true;
    if (IsOp(k, "(") || IsOp(k, "[")) expression = true;
  }
  const bool attribute_verb = verb != "assigns to" && verb != "deletes";
  if (expression && !attribute_verb && !(IsName(b - 1) && IsOp(b - 2, "."))) return;  // An item, not an attribute.
  if (expression) {
    const Binding* head = Lookup(parts[0], fn);
    const bool own = (IsSelf(parts[0], fn) && !call && QualifyThroughSelf(parts, fn).empty()) ||
                     (parts.size() == 1 && head && head->kind == Bind::kClass);
    if (!own) {
      Add("py.patch-library", a,
          std::string(verb) + " an attribute of what " + shown + (call ? "(...)" : "[...]") +
              " gives: it may be a module or a library class (patching)");
    }
    return;
  }
  if (parts.size() < 2) return;
  if (const std::string q = QualifyThroughSelf(parts, fn); !q.empty()) {
    Add("py.patch-library", a, std::string(verb) + " " + q + " through self." + std::string(parts[1]) +
                                   ": patching a module the evaluator relies on");
    return;
  }
  // self.x.y = v: self's own only when self.x holds an object the
  // candidate built (self.lib = lib, a parameter, may be a module).
  if (IsSelf(parts[0], fn) && parts.size() >= 3 && !fn->cls.empty()) {
    auto c = classes_.find(fn->cls);
    const Binding* at = c == classes_.end() ? nullptr : FindAttr(c->second.get(), parts[1], 0);
    if (!at || !OwnBinding(*at)) {
      Add("py.patch-library", a,
          std::string(verb) + " " + shown + ": self." + std::string(parts[1]) +
              " holds something kbox cannot place as the candidate's own object; it may be a module (patching)");
    }
    return;
  }
  if (OwnObject(parts[0], fn)) return;
  if (const std::string q = Qualify(parts, fn); !q.empty()) {
    Add("py.patch-library", a, std::string(verb) + " " + q + ": patching a module the evaluator relies on");
    return;
  }
  const bool param = fn && std::find(fn->params.begin(), fn->params.end(), parts[0]) != fn->params.end();
  Add("py.patch-library", a,
      std::string(verb) + " " + shown + ": `" + std::string(parts[0]) + "` is " +
          (param ? "a parameter" : "a name kbox cannot place as the candidate's own object") +
          " and may hold a module or a class (patching)");
}

bool Analyzer::HasLayerBase(const Class* c, size_t depth, std::string* what) const {
  if (depth >= kMaxResolveDepth) return false;
  for (uint32_t b : c->base_tokens) {
    if (!IsName(b)) continue;
    uint32_t end = 0;
    const auto parts = Chain(b, static_cast<uint32_t>(t_.size()), &end);
    const std::string q = Qualify(parts, nullptr);
    if (IsLibraryLayer(q)) {
      *what = q;
      return true;
    }
    if (parts.size() == 1) {
      auto base = classes_.find(parts[0]);
      if (base != classes_.end() && base->second.get() != c && HasLayerBase(base->second.get(), depth + 1, what)) {
        return true;
      }
    }
  }
  return false;
}

bool Analyzer::IsLayerBinding(const Binding& b) const { return !LayerNameOf(b).empty(); }

std::string Analyzer::LayerNameOf(const Binding& b) const {
  if (IsLibraryLayer(b.instance_of)) return b.instance_of;
  if (b.instance_of.starts_with("element-of:")) {
    const std::string_view key = std::string_view(b.instance_of).substr(11);
    const size_t dot = key.find('.');
    return dot == std::string_view::npos ? std::string() : ContainedLayer(key.substr(0, dot), key.substr(dot + 1), 0);
  }
  if (!b.instance_of.starts_with("class:")) return {};
  auto c = classes_.find(std::string_view(b.instance_of).substr(6));
  if (c == classes_.end()) return {};
  // A subclass with a forward of its own is the candidate's code (reached
  // and judged as such); one that only inherits runs the library's.
  if (FindMethod(c->second.get(), "forward", 0) || FindMethod(c->second.get(), "__call__", 0)) return {};
  std::string what;
  return HasLayerBase(c->second.get(), 0, &what) ? what : std::string();
}

size_t Analyzer::LayerPrefix(const std::vector<std::string_view>& parts, const Function* fn, std::string* what) const {
  if (parts.size() >= 2 && IsSelf(parts[0], fn) && !fn->cls.empty()) {
    if (auto c = classes_.find(fn->cls); c != classes_.end()) {
      if (const Binding* at = FindAttr(c->second.get(), parts[1], 0)) {
        *what = LayerNameOf(*at);
        if (!what->empty()) return 2;
      }
    }
    return 0;
  }
  if (IsSelf(parts[0], fn)) return 0;
  if (const Binding* b = Lookup(parts[0], fn)) {
    *what = LayerNameOf(*b);
    if (!what->empty()) return 1;
  }
  return 0;
}

bool Analyzer::IsLayerExpression(uint32_t a, uint32_t b, const Function* fn, std::string* what) const {
  if (!IsName(a)) return false;
  uint32_t e = 0;
  const auto parts = Chain(a, b, &e);
  return e == b && LayerPrefix(parts, fn, what) == parts.size();
}

void Analyzer::RuleLayerCall(uint32_t i, uint32_t end, const std::vector<std::string_view>& parts, Function* fn) {
  const bool call = IsOp(end, "(");
  std::string what;
  // self.layers[i](x), self.layers[0].forward(x): an element of a container
  // of library layers (nn.ModuleList, nn.Sequential, nn.ModuleDict).
  if (parts.size() == 2 && IsSelf(parts[0], fn) && !fn->cls.empty() && IsOp(end, "[")) {
    const std::string held = ContainedLayer(fn->cls, parts[1], 0);
    const uint32_t close = Close(end, static_cast<uint32_t>(t_.size()));
    if (!held.empty() && (IsOp(close + 1, "(") || (IsOp(close + 1, ".") && IsName(close + 2) &&
                                                   IsLayerCallName(t_[close + 2].text)))) {
      Add("py.library-module-in-forward", i,
          "forward calls an element of self." + std::string(parts[1]) + ", a " + held + ": the library computes it");
      return;
    }
  }
  const size_t n = LayerPrefix(parts, fn, &what);
  std::string shown;
  for (size_t k = 0; k < std::min(n, parts.size()); ++k) shown += (k ? "." : "") + std::string(parts[k]);
  if (n > 0 && parts.size() == n && call) {
    Add("py.library-module-in-forward", i, "forward calls " + shown + ", a " + what + ": the library computes it");
    return;
  }
  // self.fc.forward(x), layer.__call__(x), self.fc._call_impl(x), and the
  // bound method taken as a value; self.fc.__class__.forward(self.fc, x).
  if (n > 0 && ((parts.size() > n && IsLayerCallName(parts[n])) ||
                (parts.size() > n + 1 && parts[n] == "__class__" && IsLayerCallName(parts[n + 1])))) {
    Add("py.library-module-in-forward", i,
        "forward runs " + shown + "." + std::string(parts[n] == "__class__" ? parts[n + 1] : parts[n]) + " of a " +
            what + ": the library computes it");
    return;
  }
  // The layer itself handed to other code (functools.partial(self.fc),
  // map(self.fc, xs), a helper, the extension), which can call it.
  if (n > 0 && parts.size() == n && !call && (IsOp(i - 1, "(") || IsOp(i - 1, ",") || IsOp(i - 1, "[")) &&
      (IsOp(end, ")") || IsOp(end, ",") || IsOp(end, "]"))) {
    uint32_t open = i - 1;
    for (int depth = 0; open > 0; --open) {
      if (IsOp(open, ")") || IsOp(open, "]")) ++depth;
      if ((IsOp(open, "(") || IsOp(open, "[")) && depth-- == 0) break;
    }
    const bool query = IsOp(open, "(") && open > 0 && IsName(open - 1) && !IsOp(open - 2, ".") &&
                       !Lookup(t_[open - 1].text, fn) &&
                       (t_[open - 1].text == "isinstance" || t_[open - 1].text == "hasattr" ||
                        t_[open - 1].text == "getattr" || t_[open - 1].text == "type" || t_[open - 1].text == "len" ||
                        t_[open - 1].text == "print" || t_[open - 1].text == "repr" || t_[open - 1].text == "str");
    if (!query) {
      Add("py.library-module-in-forward", i,
          "forward hands the " + what + " layer " + shown + " to other code, which can call it: the library computes it");
    }
    return;
  }
  // The module registry: self._modules["fc"](x), self.get_submodule("fc")(x).
  if (parts.size() >= 2 && IsSelf(parts[0], fn) && !fn->cls.empty() &&
      (parts[1] == "_modules" || parts[1] == "get_submodule" || parts[1] == "children" || parts[1] == "modules" ||
       parts[1] == "named_children" || parts[1] == "named_modules")) {
    if (auto c = classes_.find(fn->cls); c != classes_.end()) {
      for (const auto& [attr, b] : c->second->attrs) {
        if (!IsLayerBinding(b)) continue;
        Add("py.library-module-in-forward", i,
            "forward reaches its layers through self." + std::string(parts[1]) + " (self." + std::string(attr) +
                " is a " + LayerNameOf(b) + "): the library computes them");
        return;
      }
    }
  }
  // nn.Linear.forward(self.fc, x); nn.Module.__call__(self.fc, x).
  if (parts.size() < 2 || !IsLayerCallName(parts.back())) return;
  const std::string q = Qualify(parts, fn);
  if (q.empty()) return;
  const std::string owner = q.substr(0, q.rfind('.'));
  if (IsLibraryLayer(owner)) {
    Add("py.library-module-in-forward", i, "forward runs " + q + ": the library computes it");
    return;
  }
  if (call && (owner == "torch.nn.Module" || owner == "torch.nn.modules.module.Module")) {
    const auto args = Args(end, Close(end, static_cast<uint32_t>(t_.size())));
    if (!args.empty() && IsLayerExpression(args[0].begin, args[0].end, fn, &what)) {
      Add("py.library-module-in-forward", i, "forward runs " + q + " on a " + what + ": the library computes it");
    }
  }
}

void Analyzer::EntryRules() {
  if (!model_new_) {
    sink_.Add("py.empty-forward", 0, 0, "the candidate defines no class ModelNew");
    return;
  }
  if (!forward_ && !class_alias_forward_) {
    bool has_call = model_new_->methods.contains("__call__");
    if (!has_call) {
      Add("py.empty-forward", model_new_->stmt->begin,
          "ModelNew has no forward of its own: it inherits one kbox cannot see");
    }
  }
  if (forward_ && IsEmptyBody(forward_->stmt->body)) {
    Add("py.empty-forward", forward_->stmt->begin, "ModelNew.forward does nothing");
  }
  if ((facts_.has_extension || facts_.has_triton_kernel) && !kernel_reached_) {
    const uint32_t at = forward_ ? forward_->stmt->begin : model_new_->stmt->begin;
    Add("py.forward-skips-kernel", at,
        "ModelNew.forward never reaches the compiled extension or a Triton kernel (decoy)");
  }
  // Problem sizes redefined with other values than the reference's.
  for (const PyStmt& s : m_.body()) {
    if (s.compound || s.end - s.begin < 3 || !IsName(s.begin) || !IsOp(s.begin + 1, "=")) continue;
    auto it = reference_sizes_.find(std::string(t_[s.begin].text));
    if (it == reference_sizes_.end()) continue;
    std::string value;
    for (uint32_t i = s.begin + 2; i < s.end; ++i) value += t_[i].text;
    if (value != it->second) {
      Add("py.defines-get-inputs", s.begin,
          "redefines the reference's " + it->first + " as " + value.substr(0, 40) + " (reference: " +
              it->second.substr(0, 40) + ")");
    }
  }
}

bool Analyzer::IsEmptyBody(const std::vector<PyStmt>& body) const {
  for (const PyStmt& s : body) {
    if (s.compound) return false;
    const PyToken& t = t_[s.begin];
    const bool trivial = t.IsName("pass") || (t.IsOp("...") && s.end == s.begin + 1) ||
                         (t.kind == PyTokenKind::kString && s.end == s.begin + 1) ||
                         (t.IsName("return") && (s.end == s.begin + 1 || (s.end == s.begin + 2 && t_[s.begin + 1].IsName("None"))));
    if (!trivial) return false;
  }
  return true;
}

std::string_view Analyzer::FindRuleSummary(std::string_view rule) {
  if (const RuleInfo* r = FindRule(rule)) return r->summary;
  return {};
}

}  // namespace kbox::static_check::python_analysis

namespace kbox::static_check {

PythonFacts CheckPython(const PyModule& module, const CheckInput& input, FindingSink& sink) {
  if (module.tokens().empty()) {
    sink.Add("py.empty-forward", 0, 0, "the candidate is empty");
    return {};
  }
  return python_analysis::Analyzer(module, input, sink).Run();
}

}  // namespace kbox::static_check
