#include "policy/static_check/python_analyzer.h"

#include <algorithm>

#include "policy/static_check/python_names.h"

// The model half: bindings, classes, functions, extension sources and what
// ModelNew.forward reaches.

namespace kbox::static_check::python_analysis {
namespace {

// A compiler flag that names a path outside the job: `/etc`, `~x`, `../x`,
// a glued value (`-I/etc`, `-L/usr`) or one after `=` or `,`
// (`--sysroot=/`, `-Wp,-include,/x`).
bool NamesHostPath(std::string_view f) {
  if (f.starts_with("/") || f.starts_with("~") || f.find("..") != std::string_view::npos ||
      f.find("=/") != std::string_view::npos || f.find(",/") != std::string_view::npos) {
    return true;
  }
  size_t i = 0;
  while (i < f.size() && f[i] == '-') ++i;
  if (i == 0) return false;
  while (i < f.size() && ((f[i] >= 'a' && f[i] <= 'z') || (f[i] >= 'A' && f[i] <= 'Z') || f[i] == '_')) ++i;
  return i < f.size() && f[i] == '/';
}

}  // namespace

}  // namespace kbox::static_check::python_analysis

namespace kbox::static_check {

bool FlagReadsHostFiles(std::string_view key, std::string_view f) {
  const bool reads_file = f.starts_with("-include") || f.starts_with("--include") || f.starts_with("-imacros") ||
                          f.starts_with("@") || f.starts_with("-Wl,@") || f.starts_with("--preinclude") ||
                          f.starts_with("-specs") || f.starts_with("--options-file") || f.starts_with("-B");
  // Any host path in a flag (`-I/etc`, `-I` then `/etc`, `-Wp,-include,/x`,
  // `--sysroot=/`) lets the compiler read outside the job.
  const bool abs_path = (key == "extra_include_paths" && !f.empty()) || python_analysis::NamesHostPath(f);
  const bool preprocessor_passthrough = f.find("-include") != std::string_view::npos ||
                                        f.find("-imacros") != std::string_view::npos || f.starts_with("-Wp,") ||
                                        f.starts_with("-Xpreprocessor") || f.starts_with("-idirafter") ||
                                        f.starts_with("-iprefix") || f.starts_with("-iwithprefix") ||
                                        f.starts_with("-isysroot") || f.starts_with("--sysroot") ||
                                        f.starts_with("-isystem") || f.starts_with("-iquote");
  return reads_file || abs_path || preprocessor_passthrough;
}

}  // namespace kbox::static_check

namespace kbox::static_check::python_analysis {

bool Analyzer::IsString(uint32_t i) const {
  return i < t_.size() && (t_[i].kind == PyTokenKind::kString || t_[i].kind == PyTokenKind::kFStringStart);
}

uint32_t Analyzer::Close(uint32_t open, uint32_t limit) const {
  int depth = 0;
  for (uint32_t i = open; i < limit; ++i) {
    if (t_[i].kind != PyTokenKind::kOp) continue;
    const std::string_view s = t_[i].text;
    if (s == "(" || s == "[" || s == "{") ++depth;
    if (s == ")" || s == "]" || s == "}") {
      if (--depth == 0) return i;
    }
  }
  return limit;
}

std::vector<std::pair<uint32_t, uint32_t>> Analyzer::Split(uint32_t a, uint32_t b, std::string_view sep) const {
  std::vector<std::pair<uint32_t, uint32_t>> parts;
  int depth = 0;
  uint32_t start = a;
  for (uint32_t i = a; i < b; ++i) {
    if (t_[i].kind != PyTokenKind::kOp) continue;
    const std::string_view s = t_[i].text;
    if (s == "(" || s == "[" || s == "{") ++depth;
    if (s == ")" || s == "]" || s == "}") --depth;
    if (depth == 0 && s == sep) {
      parts.emplace_back(start, i);
      start = i + 1;
    }
  }
  parts.emplace_back(start, b);
  return parts;
}

std::vector<Arg> Analyzer::Args(uint32_t open, uint32_t close) const {
  std::vector<Arg> args;
  if (close <= open + 1) return args;
  for (auto [a, b] : Split(open + 1, close, ",")) {
    if (a >= b) continue;
    Arg arg{{}, a, b};
    if (IsName(a) && IsOp(a + 1, "=")) arg = Arg{t_[a].text, a + 2, b};
    args.push_back(arg);
  }
  return args;
}

std::vector<std::string_view> Analyzer::Chain(uint32_t i, uint32_t limit, uint32_t* end) const {
  std::vector<std::string_view> parts{t_[i].text};
  uint32_t j = i + 1;
  while (j + 1 < limit && IsOp(j, ".") && IsName(j + 1)) {
    parts.push_back(t_[j + 1].text);
    j += 2;
  }
  *end = j;
  return parts;
}

std::optional<std::string> Analyzer::LiteralString(uint32_t a, uint32_t b) const {
  std::string out;
  for (auto [x, y] : Split(a, b, "+")) {
    if (x >= y) return std::nullopt;
    for (uint32_t i = x; i < y; ++i) {
      if (t_[i].kind != PyTokenKind::kString) return std::nullopt;
      auto d = DecodeStringToken(t_[i]);
      if (!d) return std::nullopt;
      out += d->value;
    }
  }
  return out;
}

const Binding* Analyzer::Lookup(std::string_view name, const Function* fn) const {
  if (fn && !fn->declared_global.contains(name)) {
    if (auto it = fn->locals.find(name); it != fn->locals.end()) return &it->second;
  }
  if (auto it = globals_.find(name); it != globals_.end()) return &it->second;
  return nullptr;
}

std::string Analyzer::Qualify(const std::vector<std::string_view>& parts, const Function* fn) const {
  std::string q;
  if (const Binding* b = Lookup(parts[0], fn)) {
    if (b->kind != Bind::kImport && b->kind != Bind::kAlias) return {};
    q = b->qual;
  } else {
    // A name no statement binds: a star import may have brought it.
    for (const std::string& star : star_imports_) {
      if (star == "torch" || star == "torch.nn.functional" || star == "numpy") {
        q = star + "." + std::string(parts[0]);
        break;
      }
    }
    if (q.empty()) return {};
  }
  for (size_t k = 1; k < parts.size(); ++k) (q += '.') += parts[k];
  return q;
}

void Analyzer::ReadReference() {
  reference_classes_.insert("Model");
  if (in_.reference_source.empty()) return;
  reference_ = PyModule::Parse(in_.reference_source);
  const auto& rt = reference_.tokens();
  for (const PyStmt& s : reference_.body()) {
    if (s.compound && s.keyword == "class" && s.begin + 1 < s.end) {
      reference_classes_.insert(std::string(rt[s.begin + 1].text));
    }
    if (!s.compound && s.end - s.begin >= 3 && rt[s.begin].kind == PyTokenKind::kName &&
        rt[s.begin + 1].IsOp("=")) {
      std::string value;
      for (uint32_t i = s.begin + 2; i < s.end; ++i) value += rt[i].text;
      reference_sizes_[std::string(rt[s.begin].text)] = value;
    }
  }
}

void Analyzer::CollectBody(const std::vector<PyStmt>& body, Class* cls, Function* fn) {
  for (const PyStmt& s : body) Collect(s, cls, fn);
}

Scope& Analyzer::ScopeOf(Class* cls, Function* fn) {
  if (fn) return fn->locals;
  if (cls) return cls->attrs;
  return globals_;
}

void Analyzer::Collect(const PyStmt& s, Class* cls, Function* fn) {
  if (!s.compound) {
    CollectSimple(s, cls, fn);
    return;
  }
  if (s.keyword == "def") {
    const uint32_t n = IsName(s.begin) && t_[s.begin].text == "async" ? s.begin + 2 : s.begin + 1;
    if (!IsName(n)) return;
    if (fn) {  // A nested def is part of its enclosing function's code.
      fn->locals[t_[n].text] = Binding{};
      if (IsTritonDecorated(s)) NoteTritonKernel(n);
      CollectBody(s.body, cls, fn);
      return;
    }
    auto f = std::make_unique<Function>();
    f->stmt = &s;
    f->name = t_[n].text;
    f->cls = cls ? cls->name : std::string_view{};
    // Parameters are locals.
    if (IsOp(n + 1, "(")) {
      const uint32_t close = Close(n + 1, s.end);
      for (const Arg& a : Args(n + 1, close)) {
        uint32_t p = a.begin;
        while (p < a.end && (IsOp(p, "*") || IsOp(p, "**"))) ++p;
        if (IsName(p)) {
          f->locals[t_[p].text] = Binding{};
          f->params.push_back(t_[p].text);
        }
        if (!a.keyword.empty()) {
          f->locals[a.keyword] = Binding{};
          f->params.push_back(a.keyword);
        }
      }
    }
    for (const PyStmt& d : s.decorators) {
      if (IsName(d.begin + 1) && t_[d.begin + 1].text == "staticmethod") f->is_static = true;
    }
    Function* raw = f.get();
    functions_.push_back(std::move(f));
    function_by_def_[&s] = raw;
    CollectBody(s.body, nullptr, raw);
    const bool triton = IsTritonDecorated(s);
    if (triton) NoteTritonKernel(n);
    if (cls) {
      cls->methods[raw->name] = raw;
    } else {
      globals_[raw->name] = Binding{triton ? Bind::kTritonKernel : Bind::kFunction, {}, raw->name, 0, 0, {}};
      module_functions_[raw->name] = raw;
    }
    return;
  }
  if (s.keyword == "class") {
    if (!IsName(s.begin + 1)) return;
    if (fn || cls) {
      ScopeOf(cls, fn)[t_[s.begin + 1].text] = Binding{};
      return;
    }
    auto c = std::make_unique<Class>();
    c->stmt = &s;
    c->name = t_[s.begin + 1].text;
    if (IsOp(s.begin + 2, "(")) {
      const uint32_t close = Close(s.begin + 2, s.end);
      for (const Arg& a : Args(s.begin + 2, close)) {
        if (a.keyword.empty()) c->base_tokens.push_back(a.begin);
      }
    }
    Class* raw = c.get();
    classes_[raw->name] = std::move(c);
    globals_[raw->name] = Binding{Bind::kClass, {}, raw->name, 0, 0, {}};
    CollectBody(s.body, raw, nullptr);
    return;
  }
  // if/for/while/with/try/except...: same scope; targets bind names.
  if (s.keyword == "for" || s.keyword == "with" || s.keyword == "except") {
    for (uint32_t i = s.begin; i < s.end; ++i) {
      if ((t_[i].IsName("as") || t_[i].IsName("for")) && IsName(i + 1)) {
        Binding b;
        // `for p in self.parameters():` iterates the candidate's own objects.
        uint32_t in = i + 2;
        while (in < s.end && !t_[in].IsName("in") && !IsOp(in, ":")) ++in;
        if (t_[i].IsName("for") && in + 1 < s.end && t_[in].IsName("in") && IsName(in + 1) &&
            IsSelf(t_[in + 1].text, fn)) {
          b.instance_of = "element";
          // `for layer in self.layers:`: an element of the container.
          if (IsOp(in + 2, ".") && IsName(in + 3) && IsOp(in + 4, ":")) {
            b.instance_of = "element-of:" + std::string(fn->cls) + "." + std::string(t_[in + 3].text);
          }
        }
        // `for i, layer in enumerate(self.layers):`: the second name.
        if (t_[i].IsName("for") && IsOp(i + 2, ",") && IsName(i + 3) && in == i + 4 && t_[in].IsName("in") &&
            t_[in + 1].IsName("enumerate") && IsOp(in + 2, "(") && IsName(in + 3) && IsSelf(t_[in + 3].text, fn) &&
            IsOp(in + 4, ".") && IsName(in + 5) && IsOp(in + 6, ")")) {
          Binding e;
          e.instance_of = "element-of:" + std::string(fn->cls) + "." + std::string(t_[in + 5].text);
          ScopeOf(cls, fn)[t_[i + 3].text] = e;
        }
        ScopeOf(cls, fn)[t_[i + 1].text] = b;
      }
    }
  }
  CollectBody(s.body, cls, fn);
}

bool Analyzer::IsTritonDecorated(const PyStmt& def) const {
  for (const PyStmt& d : def.decorators) {
    uint32_t end = 0;
    if (!IsName(d.begin + 1)) continue;
    const auto parts = Chain(d.begin + 1, d.end, &end);
    const std::string q = Qualify(parts, nullptr);
    if (q == "triton.jit" || q == "triton.autotune" || q == "triton.heuristics" ||
        q == "triton.runtime.jit.jit") {
      return true;
    }
  }
  return false;
}

void Analyzer::NoteTritonKernel(uint32_t tok) {
  facts_.has_triton_kernel = true;
  facts_.triton_kernels.push_back(KernelNameAt{std::string(t_[tok].text), t_[tok].line, t_[tok].column});
}

void Analyzer::CollectSimple(const PyStmt& s, Class* cls, Function* fn) {
  Scope& scope = ScopeOf(cls, fn);
  const PyToken& first = t_[s.begin];
  if (first.IsName("return") && fn && s.end > s.begin + 1) {
    if (ClassifyValue(s.begin + 1, s.end, fn, &s).kind == Bind::kExtension) fn->returns_extension = true;
    return;
  }
  if (first.IsName("import")) {
    for (auto [a, b] : Split(s.begin + 1, s.end, ",")) {
      std::string mod;
      uint32_t i = a;
      for (; i < b && !t_[i].IsName("as"); ++i) mod += t_[i].text;
      if (i + 1 < b && IsName(i + 1)) {
        scope[t_[i + 1].text] = Binding{Bind::kImport, mod, {}, 0, 0, {}};
      } else if (IsName(a)) {
        scope[t_[a].text] = Binding{Bind::kImport, std::string(t_[a].text), {}, 0, 0, {}};
      }
    }
    return;
  }
  if (first.IsName("from")) {
    std::string mod;
    uint32_t i = s.begin + 1;
    for (; i < s.end && !t_[i].IsName("import"); ++i) mod += t_[i].text;
    uint32_t a = i + 1, b = s.end;
    if (IsOp(a, "(")) {
      ++a;
      if (b > a && IsOp(b - 1, ")")) --b;
    }
    if (IsOp(a, "*")) {
      star_imports_.push_back(mod);
      return;
    }
    for (auto [x, y] : Split(a, b, ",")) {
      if (!IsName(x)) continue;
      const std::string_view name = y >= x + 3 && t_[x + 1].IsName("as") ? t_[x + 2].text : t_[x].text;
      const bool relative = !mod.empty() && mod[0] == '.';
      scope[name] = relative ? Binding{} : Binding{Bind::kImport, mod + "." + std::string(t_[x].text), {}, 0, 0, {}};
    }
    return;
  }
  if (first.IsName("global") || first.IsName("nonlocal")) {
    if (fn) {
      for (uint32_t i = s.begin + 1; i < s.end; ++i) {
        if (IsName(i)) fn->declared_global.insert(t_[i].text);
      }
    }
    return;
  }
  // Assignments: every top-level '=' separates a target from what follows.
  auto eqs = Split(s.begin, s.end, "=");
  // `self.layers.append(nn.Linear(...))`: a container of library layers.
  if (eqs.size() < 2 && fn && !fn->cls.empty() && t_[s.begin].IsName("self") && IsOp(s.begin + 1, ".") &&
      IsName(s.begin + 2) && IsOp(s.begin + 3, ".") && IsName(s.begin + 4) && IsOp(s.begin + 5, "(")) {
    const std::string_view m = t_[s.begin + 4].text;
    if (m == "append" || m == "extend" || m == "insert" || m == "add_module" || m == "register_module" ||
        m == "update") {
      NoteLayerContainer(fn->cls, t_[s.begin + 2].text, s.begin + 5, s.end, fn);
    }
  }
  // Attributes made by a call: self.register_buffer("scale", t),
  // setattr(self, "lib", torch). The value is classified like `self.X = v`.
  if (eqs.size() < 2 && fn && !fn->cls.empty() && !fn->params.empty()) {
    uint32_t open = 0;
    if (t_[s.begin].IsName(fn->params[0]) && IsOp(s.begin + 1, ".") && IsName(s.begin + 2) &&
        IsOp(s.begin + 3, "(")) {
      const std::string_view m = t_[s.begin + 2].text;
      if (m == "register_buffer" || m == "register_parameter" || m == "add_module" || m == "register_module") {
        open = s.begin + 3;
      }
    }
    if (t_[s.begin].IsName("setattr") && IsOp(s.begin + 1, "(") && t_[s.begin + 2].IsName(fn->params[0]) &&
        IsOp(s.begin + 3, ",")) {
      open = s.begin + 1;
    }
    if (open) {
      const auto args = Args(open, Close(open, s.end));
      const size_t name_at = t_[s.begin].IsName("setattr") ? 1 : 0;
      if (args.size() > name_at + 1 && args[name_at].end == args[name_at].begin + 1) {
        if (auto name = LiteralString(args[name_at].begin, args[name_at].end)) {
          if (auto c = classes_.find(fn->cls); c != classes_.end()) {
            Binding v = ClassifyValue(args[name_at + 1].begin, args[name_at + 1].end, fn, &s);
            auto& slot = c->second->attrs[*lit_store_.insert(*name).first];
            if (slot.kind != Bind::kExtension) slot = v;
          }
        }
      }
    }
  }
  if (eqs.size() < 2) {
    // Annotated assignment without value, or an augmented one: no new alias.
    if (IsName(s.begin) && (IsOp(s.begin + 1, ":") || IsAugOp(s.begin + 1))) {
      const std::string_view name = t_[s.begin].text;
      if (!Lookup(name, fn)) scope[name] = Binding{};
      // `src += more` (in a loop, say): the name no longer holds the literal
      // it was bound to, so its text is read after the compile.
      Scope& target = fn && fn->declared_global.contains(name) ? globals_ : scope;
      if (IsAugOp(s.begin + 1)) {
        if (auto it = target.find(name); it != target.end() && it->second.kind == Bind::kString) it->second = Binding{};
      }
    }
    return;
  }
  const auto [va, vb] = eqs.back();
  for (size_t k = 0; k + 1 < eqs.size(); ++k) {
    auto [ta, tb] = eqs[k];
    // `x: int = 5`
    auto ann = Split(ta, tb, ":");
    tb = ann.front().second;
    const auto targets = Split(ta, tb, ",");
    for (auto [a, b] : targets) {
      while (a < b && (IsOp(a, "(") || IsOp(a, "[") || IsOp(a, "*"))) ++a;
      if (!IsName(a)) continue;
      if (b - a == 1 || (b - a == 2 && (IsOp(a + 1, ")") || IsOp(a + 1, "]")))) {
        Binding v = targets.size() == 1 ? ClassifyValue(va, vb, fn, &s) : Binding{};
        // `global _ext` then `_ext = load_inline(...)` binds the module's name;
        // a name that ever holds the extension stays the extension.
        Scope& target = fn && fn->declared_global.contains(t_[a].text) ? globals_ : scope;
        const std::pair<const Scope*, std::string_view> key{&target, t_[a].text};
        const bool rebound = !assigned_names_.insert(key).second;
        Binding& slot = target[t_[a].text];
        // A name given text and bound again: which text a load_inline call
        // saw depends on the order things ran in (`src = EVIL; ext =
        // load_inline(..., src); src = HONEST`), so it is read after the
        // compile.
        if (rebound && (slot.kind == Bind::kString || v.kind == Bind::kString)) text_rebound_.insert(key);
        if (v.kind == Bind::kString && text_rebound_.contains(key)) v = Binding{};
        if (&target == &scope || slot.kind != Bind::kExtension) slot = v;
      } else if (t_[a].IsName("self") && IsOp(a + 1, ".") && IsName(a + 2) && b == a + 3 && fn && !fn->cls.empty()) {
        if (auto c = classes_.find(fn->cls); c != classes_.end()) {
          Binding v = targets.size() == 1 ? ClassifyValue(va, vb, fn, &s) : Binding{};
          auto& slot = c->second->attrs[t_[a + 2].text];
          // The strongest fact wins: an attribute that ever holds the
          // extension counts as the extension.
          if (slot.kind != Bind::kExtension) slot = v;
          // nn.ModuleList([nn.Linear(...) ...]), nn.Sequential(nn.Linear(...)).
          if (v.instance_of == "torch.nn.ModuleList" || v.instance_of == "torch.nn.ModuleDict" ||
              v.instance_of == "torch.nn.Sequential" || v.instance_of == "torch.nn.modules.container.ModuleList") {
            NoteLayerContainer(fn->cls, t_[a + 2].text, va, vb, fn);
          }
        }
      }
    }
  }
}

void Analyzer::NoteLayerContainer(std::string_view cls, std::string_view attr, uint32_t a, uint32_t b,
                                  const Function* fn) {
  for (uint32_t i = a; i < b; ++i) {
    if (!IsName(i) || IsOp(i - 1, ".")) continue;
    uint32_t end = 0;
    const std::string q = Qualify(Chain(i, b, &end), fn);
    if (IsLibraryLayer(q) && q != "torch.nn.ModuleList" && q != "torch.nn.ModuleDict") {
      layer_containers_.emplace(std::string(cls) + "." + std::string(attr), q);
      return;
    }
  }
}

bool Analyzer::IsAugOpText(std::string_view s) {
  return s == "+=" || s == "-=" || s == "*=" || s == "/=" || s == "//=" || s == "%=" || s == "@=" ||
         s == "&=" || s == "|=" || s == "^=" || s == ">>=" || s == "<<=" || s == "**=";
}

Binding Analyzer::ClassifyValue(uint32_t a, uint32_t b, Function* fn, const PyStmt* stmt) {
  Binding out;
  if (a >= b) return out;
  if (t_[a].IsName("lambda")) {
    auto f = std::make_unique<Function>();
    f->stmt = stmt;
    f->lambda = true;
    f->name = "<lambda>";
    lambda_ranges_[f.get()] = {a, b};
    lambda_by_value_[a] = f.get();
    Function* raw = f.get();
    functions_.push_back(std::move(f));
    return Binding{Bind::kFunction, {}, {}, a, b, {}};
    (void)raw;
  }
  // A parenthesised value: `src = ("..." "...")`.
  while (IsOp(a, "(") && Close(a, b) == b - 1 && b - a > 2 && Split(a + 1, b - 1, ",").size() == 1) {
    ++a;
    --b;
  }
  // Text, or a number an f-string or .format may splice into a source.
  if (IsString(a) || (b == a + 1 && t_[a].kind == PyTokenKind::kNumber)) {
    return Binding{Bind::kString, {}, {}, a, b, {}};
  }
  // Literal containers are not tensors: `cache = {}` then `cache.update(...)`.
  if (IsOp(a, "{") || IsOp(a, "[")) {
    out.instance_of = "container";
    return out;
  }
  if (!IsName(a)) return out;
  uint32_t end = 0;
  std::vector<std::string_view> parts;
  if (t_[a].IsName("getattr") && IsOp(a + 1, "(")) {
    const uint32_t close = Close(a + 1, b);
    const auto args = Args(a + 1, close);
    if (args.size() >= 2 && IsName(args[0].begin)) {
      uint32_t e = 0;
      parts = Chain(args[0].begin, args[0].end, &e);
      auto lit = LiteralString(args[1].begin, args[1].end);
      if (e == args[0].end && lit) {
        parts.push_back(*lit_store_.insert(*lit).first);
        end = close + 1;
      } else {
        return out;
      }
    } else {
      return out;
    }
  } else {
    parts = Chain(a, b, &end);
  }
  const Binding* head = Lookup(parts[0], fn);
  const std::string q = Qualify(parts, fn);
  // `TEMPLATE.format(...)`, `SRC.replace(...)`: text derived from text.
  if (head && head->kind == Bind::kString && parts.size() == 2) return Binding{Bind::kString, {}, {}, a, b, {}};
  if (end == b) {  // A bare chain: an alias.
    if (!q.empty()) return Binding{Bind::kAlias, q, {}, 0, 0, {}};
    if (head && (head->kind == Bind::kExtension)) return Binding{Bind::kExtension, {}, {}, 0, 0, {}};
    if (head && parts.size() == 1) return *head;
    if (parts[0] == "self" && parts.size() == 2 && fn && !fn->cls.empty()) {
      if (auto c = classes_.find(fn->cls); c != classes_.end()) {
        if (auto it = c->second->attrs.find(parts[1]); it != c->second->attrs.end()) return it->second;
      }
    }
    return out;
  }
  if (IsOp(end, "(")) {
    const uint32_t close = Close(end, b);
    if (head && head->kind == Bind::kFunction && parts.size() == 1) {
      if (auto m = module_functions_.find(head->target); m != module_functions_.end() && m->second->returns_extension) {
        return Binding{Bind::kExtension, {}, {}, 0, 0, {}};
      }
    }
    if (q == "torch.utils.cpp_extension.load_inline" || q == "torch.utils.cpp_extension.load") {
      extension_calls_.push_back(ExtensionCall{end, close, q.ends_with("load_inline"), a});
      facts_.has_extension = true;
      return Binding{Bind::kExtension, {}, {}, 0, 0, {}};
    }
    if (q == "triton.jit" || q == "triton.autotune") {
      facts_.has_triton_kernel = true;
      // `k = triton.jit(f)`: the kernel keeps f's name.
      if (q == "triton.jit" && IsName(end + 1) && (IsOp(end + 2, ")") || IsOp(end + 2, ","))) {
        const Binding* f = Lookup(t_[end + 1].text, fn);
        if (f && (f->kind == Bind::kFunction || f->kind == Bind::kTritonKernel)) NoteTritonKernel(end + 1);
      }
      return Binding{Bind::kTritonKernel, {}, {}, 0, 0, {}};
    }
    if (!q.empty()) out.instance_of = q;
    if (parts.size() == 1 && !head && (parts[0] == "set" || parts[0] == "dict" || parts[0] == "list")) {
      out.instance_of = "container";
    }
    if (q.starts_with("collections.")) out.instance_of = "container";
    if (head && head->kind == Bind::kClass && parts.size() == 1) out.instance_of = "class:" + std::string(head->target);
  }
  return out;
}

void Analyzer::ExtractSources() {
  std::set<uint32_t> seen;  // `a = b = load_inline(...)` is classified once per target.
  for (const ExtensionCall& call : extension_calls_) {
    if (!seen.insert(call.open).second) continue;
    // What kbox cannot read here is read after the compile, from what the
    // call really received (CheckReportedExtensions): the first reason.
    std::string deferred;
    const auto defer = [&](std::string why) {
      if (deferred.empty()) deferred = std::move(why);
    };
    const auto args = Args(call.open, call.close);
    for (const Arg& a : args) {
      if (a.keyword.empty() && (IsOp(a.begin, "*") || IsOp(a.begin, "**"))) {
        defer("load_inline arguments unpacked from a container");
      }
    }
    for (size_t k = 0; k < args.size(); ++k) {
      const Arg& a = args[k];
      std::string_view key = a.keyword;
      if (key.empty()) key = call.inline_sources ? (k == 1 ? "cpp_sources" : k == 2 ? "cuda_sources" : "")
                                                  : (k == 1 ? "sources" : "");
      if (key == "cpp_sources" || key == "cuda_sources") {
        auto text = StringValue(a.begin, a.end, 0);
        if (!text) {
          defer(std::string(key) + " is not literal text kbox can read");
          continue;
        }
        facts_.sources.push_back(ExtensionSource{std::move(*text), key == "cuda_sources"});
      } else if (key == "sources") {
        defer("load(sources=...) builds files kbox reads only when they are built");
      } else if (key == "extra_cflags" || key == "extra_cuda_cflags" || key == "extra_ldflags" ||
                 key == "extra_include_paths") {
        if (!CheckFlags(a, key)) defer(std::string(key) + " is not literal text kbox can read");
      }
    }
    if (deferred.empty()) continue;
    const PyToken& first = t_[std::min<size_t>(call.begin, t_.size() - 1)];
    const PyToken& last = t_[std::min<size_t>(call.close, t_.size() - 1)];
    facts_.deferred.push_back(DeferredCall{first.line, first.column, std::max(first.line, last.line),
                                           std::move(deferred)});
  }
}

bool Analyzer::CheckFlags(const Arg& a, std::string_view key) {
  auto flags = StringList(a.begin, a.end, 0);
  if (!flags) return false;
  for (const DecodedString& p : *flags) {
    if (FlagReadsHostFiles(key, p.value)) {
      Add("cpp.include-path", a.begin,
          "compiler flag `" + p.value.substr(0, 60) + "` reads host files at compile time");
    }
  }
  return true;
}


void Analyzer::Reach() {
  auto it = classes_.find("ModelNew");
  if (it == classes_.end()) return;
  model_new_ = it->second.get();
  std::vector<const Function*> work;
  std::set<const Class*> visited_classes;
  // forward (or __call__) of ModelNew, or of a candidate base class it inherits.
  std::function<void(const Class*)> entry = [&](const Class* c) {
    if (!visited_classes.insert(c).second) return;
    bool found = false;
    for (std::string_view n : {"forward", "__call__"}) {
      if (auto m = c->methods.find(n); m != c->methods.end()) {
        work.push_back(m->second);
        found = true;
        if (n == "forward") forward_ = forward_ ? forward_ : m->second;
      }
      if (auto a = c->attrs.find(n); a != c->attrs.end()) {
        found = true;
        class_alias_forward_ = true;
        if (a->second.kind == Bind::kExtension) kernel_reached_ = true;
        if (a->second.kind == Bind::kFunction && module_functions_.contains(a->second.target)) {
          work.push_back(module_functions_[a->second.target]);
        }
      }
    }
    if (found) return;
    for (uint32_t b : c->base_tokens) {
      if (IsName(b)) {
        if (auto base = classes_.find(t_[b].text); base != classes_.end()) entry(base->second.get());
      }
    }
  };
  entry(model_new_);
  while (!work.empty()) {
    const Function* f = work.back();
    work.pop_back();
    if (!reached_.insert(f).second) continue;
    ForEachRange(f, [&](uint32_t a, uint32_t b) { ReachRefs(a, b, f, &work); });
    // A decorator can replace the function it decorates: what it runs is reached.
    if (!f->lambda) {
      for (const PyStmt& d : f->stmt->decorators) ReachRefs(d.begin, d.end, f, &work);
    }
  }
}

void Analyzer::ForEachRange(const Function* f, const std::function<void(uint32_t, uint32_t)>& fn) const {
  if (f->lambda) {
    auto r = lambda_ranges_.at(f);
    fn(r.first, r.second);
    return;
  }
  std::function<void(const std::vector<PyStmt>&)> walk = [&](const std::vector<PyStmt>& body) {
    for (const PyStmt& s : body) {
      for (const PyStmt& d : s.decorators) fn(d.begin, d.end);
      fn(s.begin, s.end);
      walk(s.body);
    }
  };
  walk(f->stmt->body);
}

void Analyzer::ReachClass(const Class* c, std::vector<const Function*>* work) {
  for (const auto& [n, m] : c->methods) work->push_back(m);
}

void Analyzer::ReachRefs(uint32_t a, uint32_t b, const Function* f, std::vector<const Function*>* work) {
  const Class* cls = nullptr;
  if (!f->cls.empty()) {
    if (auto c = classes_.find(f->cls); c != classes_.end()) cls = c->second.get();
  }
  for (uint32_t i = a; i < b; ++i) {
    if (!IsName(i) || IsOp(i - 1, ".")) continue;
    uint32_t end = 0;
    const auto parts = Chain(i, b, &end);
    if (parts[0] == "self" && cls && parts.size() >= 2) {
      // The method or attribute may come from a candidate base class.
      if (const Function* m = FindMethod(cls, parts[1], 0)) work->push_back(m);
      if (const Binding* at = FindAttr(cls, parts[1], 0)) ReachBinding(*at, work);
      continue;
    }
    if (parts[0] == "super" && cls && IsOp(end, "(") && IsOp(end + 2, ".") && IsName(end + 3)) {
      for (uint32_t base : cls->base_tokens) {
        if (!IsName(base)) continue;
        if (auto c = classes_.find(t_[base].text); c != classes_.end()) {
          if (auto m = c->second->methods.find(t_[end + 3].text); m != c->second->methods.end()) {
            work->push_back(m->second);
          }
        }
      }
    }
    if (const Binding* bnd = Lookup(parts[0], f)) ReachBinding(*bnd, work);
    const std::string q = Qualify(parts, f);
    if (q.starts_with("torch.ops.") && parts.size() >= 3 && !IsLibraryCompute(q)) kernel_reached_ = true;
  }
}

const Function* Analyzer::FindMethod(const Class* c, std::string_view name, size_t depth) const {
  if (auto m = c->methods.find(name); m != c->methods.end()) return m->second;
  if (depth >= kMaxResolveDepth) return nullptr;
  for (uint32_t b : c->base_tokens) {
    if (!IsName(b)) continue;
    if (auto base = classes_.find(t_[b].text); base != classes_.end() && base->second.get() != c) {
      if (const Function* m = FindMethod(base->second.get(), name, depth + 1)) return m;
    }
  }
  return nullptr;
}

const Binding* Analyzer::FindAttr(const Class* c, std::string_view name, size_t depth) const {
  if (auto a = c->attrs.find(name); a != c->attrs.end()) return &a->second;
  if (depth >= kMaxResolveDepth) return nullptr;
  for (uint32_t b : c->base_tokens) {
    if (!IsName(b)) continue;
    if (auto base = classes_.find(t_[b].text); base != classes_.end() && base->second.get() != c) {
      if (const Binding* a = FindAttr(base->second.get(), name, depth + 1)) return a;
    }
  }
  return nullptr;
}

void Analyzer::ReachBinding(const Binding& b, std::vector<const Function*>* work) {
  switch (b.kind) {
    case Bind::kExtension:
    case Bind::kTritonKernel: kernel_reached_ = true; break;
    case Bind::kFunction:
      if (b.value_end > 0) {
        if (auto l = lambda_by_value_.find(b.value_begin); l != lambda_by_value_.end()) work->push_back(l->second);
      } else if (auto m = module_functions_.find(b.target); m != module_functions_.end()) {
        work->push_back(m->second);
      }
      break;
    case Bind::kClass:
      if (auto c = classes_.find(b.target); c != classes_.end()) ReachClass(c->second.get(), work);
      break;
    default:
      if (b.instance_of.starts_with("class:")) {
        if (auto c = classes_.find(std::string_view(b.instance_of).substr(6)); c != classes_.end()) {
          ReachClass(c->second.get(), work);
        }
      }
  }
}

}  // namespace kbox::static_check::python_analysis
