#include "policy/static_check/python_rules.h"

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
    }
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
        if (const Binding* at = FindAttr(c->second.get(), parts[1], 0)) {
          self_ext = at->kind == Bind::kExtension;
          if (reached && parts.size() == 2 && IsLibraryLayer(at->instance_of)) {
            Add("py.library-module-in-forward", i,
                "forward calls self." + std::string(parts[1]) + ", a " + at->instance_of +
                    ": the library computes it");
          }
        }
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
  if (!folded || !IsName(args[0].begin)) return;
  uint32_t e = 0;
  auto parts = Chain(args[0].begin, args[0].end, &e);
  if (e != args[0].end) return;
  parts.push_back(*lit_store_.insert(*folded).first);
  const std::string q = Qualify(parts, fn);
  if (which == "setattr" && parts.size() >= 2 && !q.empty()) {
    Add("py.patch-library", i, "setattr on " + q + ": patching a module the evaluator relies on");
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
