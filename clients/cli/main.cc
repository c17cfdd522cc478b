// kbox: command-line client of kboxd.
//
//   kbox eval --server URL --reference R.py --candidate C.py [--backend cpu|cuda|triton]
//             [--profile NAME] [--rule ID=SEVERITY ...] [--json]
//   kbox check FILE [--reference R.py] [--backend ...] [--precision ...] [--profile NAME]
//             [--rule ID=SEVERITY ...] [--json]
//   kbox info --server URL [--json]
//
// Every command takes --token-file PATH (else $KBOX_TOKEN): the API token
// kboxd wants when it has api_tokens_file (docs/api.md).
//
// Exit status: 0 when the server answered with a result (a wrong kernel is a
// result, not a failure; for `check`: no verdict rejects); 1 (`check` only)
// when an anti-cheat rule rejects the candidate; 2 for usage errors and
// requests the server refused as malformed (4xx); 3 when the server could not
// be reached or failed (5xx).

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "clients/http_client.h"
#include "clients/result_summary.h"
#include "kbox/v1/api.pb.h"
#include "kbox/v1/evaluation.pb.h"

namespace {

namespace po = boost::program_options;
using kbox::v1::EvaluateRequest;
using kbox::v1::EvaluateResult;

constexpr int kRejected = 1;
constexpr int kUsageError = 2;
constexpr int kServerError = 3;
// A job may take its run-stage limit plus a cold compile; wait long enough.
constexpr auto kEvalTimeout = std::chrono::seconds(3600);
constexpr auto kInfoTimeout = std::chrono::seconds(30);
constexpr auto kCheckTimeout = std::chrono::seconds(60);

const char* kUsage =
    "usage: kbox eval [--server URL] --reference R.py --candidate C.py [options]\n"
    "       kbox check [--server URL] FILE [--reference R.py] [--backend cpu|cuda|triton]\n"
    "                  [--precision fp32|fp16|bf16] [--profile NAME] [--rule ID=SEVERITY ...]\n"
    "                  [--json]\n"
    "       kbox info [--server URL] [--json]\n"
    "       kbox eval-dir --server URL --problems DIR --candidates DIR --backend B --out OUT\n"
    "`eval-dir` evaluates a KernelBench-style run and writes its summary, CSV and plot\n"
    "(the Python client's kbox_client.eval_dir; `kbox eval-dir --help`).\n"
    "`eval` evaluates a candidate (`kbox eval --help` lists its options); `check` runs the\n"
    "static anti-cheat checks alone and prints one line per verdict:\n"
    "  candidate.py:LINE:COL: SEVERITY RULE-ID: MESSAGE\n"
    "--profile names an anti-cheat profile of the server (`kbox info` lists them);\n"
    "--rule ID=SEVERITY (repeatable) sets one rule to reject, suspicious, info or off.\n"
    "The server URL defaults to $KBOX_URL (its first URL), then $KBOX_SERVER, then\n"
    "http://127.0.0.1:8080, as in the Python client.\n"
    "--token-file PATH (every command) sends the API token in PATH; else $KBOX_TOKEN, if set.\n"
    "Exit status: 0 answered (eval: any result; check: nothing rejected);\n"
    "  1 check: an anti-cheat rule rejects the candidate;\n"
    "  2 usage error, or the server refused the request (4xx);\n"
    "  3 the server could not be reached or failed (5xx).\n";

int Usage(const std::string& message) {
  std::cerr << "kbox: " << message << "\n" << kUsage;
  return kUsageError;
}

bool ReadFile(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  out = text.str();
  return true;
}

// The same variables as the Python client's: $KBOX_URL (its first URL when
// it lists several), then $KBOX_SERVER.
std::string DefaultServer() {
  if (const char* urls = std::getenv("KBOX_URL"); urls && *urls) {
    const std::string all(urls);
    return all.substr(0, all.find(','));
  }
  const char* env = std::getenv("KBOX_SERVER");
  return env && *env ? env : "http://127.0.0.1:8080";
}

// Prints the server's refusal; returns the exit status it deserves.
int ReportHttpError(const kbox::HttpReply& reply) {
  kbox::v1::ErrorResponse error;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  // kboxd answers in the request's encoding: binary for `kbox eval`.
  const bool parsed = reply.content_type.starts_with("application/x-protobuf")
                          ? error.ParseFromString(reply.body)
                          : google::protobuf::util::JsonStringToMessage(reply.body, &error, options).ok();
  if (parsed) {
    std::cerr << "kbox: server refused the request (" << reply.status << ")"
              << (error.field().empty() ? "" : " [" + error.field() + "]") << ": "
              << error.message() << "\n";
  } else {
    std::cerr << "kbox: server answered " << reply.status << ": " << reply.body << "\n";
  }
  return reply.status >= 500 ? kServerError : kUsageError;
}

const std::map<std::string, kbox::v1::Backend>& Backends() {
  static const std::map<std::string, kbox::v1::Backend> kBackends = {
      {"cpu", kbox::v1::BACKEND_CPU}, {"cuda", kbox::v1::BACKEND_CUDA},
      {"triton", kbox::v1::BACKEND_TRITON}};
  return kBackends;
}

const std::map<std::string, kbox::v1::Precision>& Precisions() {
  static const std::map<std::string, kbox::v1::Precision> kPrecisions = {
      {"fp32", kbox::v1::PRECISION_FP32}, {"fp16", kbox::v1::PRECISION_FP16},
      {"bf16", kbox::v1::PRECISION_BF16}};
  return kPrecisions;
}

// `--rule ID=SEVERITY` flags into the request's overrides; the server checks
// ids and severities. Returns an error message, or "".
std::string ParseRules(const std::vector<std::string>& rules,
                       google::protobuf::Map<std::string, std::string>* overrides) {
  for (const auto& rule : rules) {
    const auto eq = rule.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == rule.size()) {
      return "--rule wants ID=SEVERITY (e.g. py.matmul-operator=suspicious), got '" + rule + "'";
    }
    (*overrides)[rule.substr(0, eq)] = rule.substr(eq + 1);
  }
  return "";
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

int Eval(const std::vector<std::string>& args) {
  std::string server = DefaultServer(), reference, candidate, backend = "cpu", precision = "fp32";
  std::string token_file;
  unsigned trials = 0, time_limit = 0, perf_trials = 0;
  int64_t seed = -1;
  std::string request_id, profile;
  std::vector<std::string> rules;
  po::options_description desc("kbox eval options");
  desc.add_options()("server", po::value(&server), "kboxd URL (default $KBOX_URL, then $KBOX_SERVER)")(
      "token-file", po::value(&token_file), "file holding the API token (default $KBOX_TOKEN)")(
      "reference", po::value(&reference), "reference .py (class Model, get_inputs, get_init_inputs)")(
      "candidate", po::value(&candidate), "candidate .py (class ModelNew)")(
      "backend", po::value(&backend), "cpu, cuda or triton (default cpu)")(
      "precision", po::value(&precision), "fp32, fp16 or bf16 (default fp32)")(
      "trials", po::value(&trials), "correctness trials (default: server's, 5)")(
      "seed", po::value(&seed), "seed (default: drawn by the server)")(
      "perf-trials", po::value(&perf_trials), "timed calls per model")(
      "time-limit", po::value(&time_limit), "run-stage limit, seconds")(
      "no-perf", "skip timing")("id", po::value(&request_id), "client request id")(
      "profile", po::value(&profile), "anti-cheat profile (default: the server's)")(
      "rule", po::value(&rules), "ID=SEVERITY: override one anti-cheat rule (repeatable)")(
      "json", "print the result as proto3 JSON")("help,h", "print this help");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Usage(e.what());
  }
  if (vm.count("help")) {
    std::cout << "usage: kbox eval [--server URL] --reference R.py --candidate C.py [options]\n"
              << desc;
    return 0;
  }
  if (reference.empty() || candidate.empty()) return Usage("--reference and --candidate are required");

  EvaluateRequest req;
  if (!ReadFile(reference, *req.mutable_reference_source())) return Usage("cannot read " + reference);
  if (!ReadFile(candidate, *req.mutable_candidate_source())) return Usage("cannot read " + candidate);
  if (!Backends().contains(backend)) return Usage("unknown backend " + backend);
  if (!Precisions().contains(precision)) return Usage("unknown precision " + precision);
  req.set_backend(Backends().at(backend));
  req.set_precision(Precisions().at(precision));
  req.set_anticheat_profile(profile);
  if (auto e = ParseRules(rules, req.mutable_anticheat_overrides()); !e.empty()) return Usage(e);
  req.set_correctness_trials(trials);
  if (seed >= 0) req.set_seed(static_cast<uint64_t>(seed));
  if (vm.count("no-perf")) req.set_measure_performance(false);
  req.set_performance_trials(perf_trials);
  req.set_time_limit_s(time_limit);
  req.set_client_request_id(request_id);

  auto url = kbox::ParseServerUrl(server);
  if (!url) return Usage(url.error().message);
  auto token = kbox::ResolveToken(token_file);
  if (!token) return Usage(token.error().message);
  auto reply = kbox::HttpCall(*url, "POST", "/v1/evaluate", "application/x-protobuf",
                              req.SerializeAsString(), kEvalTimeout, *token);
  if (!reply) {
    std::cerr << "kbox: " << reply.error().message << "\n";
    return kServerError;
  }
  if (reply->status != 200) return ReportHttpError(*reply);
  EvaluateResult result;
  if (!result.ParseFromString(reply->body)) {
    std::cerr << "kbox: the server's answer is not an EvaluateResult\n";
    return kServerError;
  }
  std::cout << (vm.count("json") ? ToJson(result) : kbox::SummarizeResult(result));
  return 0;
}

int Check(const std::vector<std::string>& args) {
  std::string server = DefaultServer(), file, reference, backend = "cpu", precision = "fp32";
  std::string token_file;
  std::string profile, request_id;
  std::vector<std::string> rules;
  po::options_description desc("kbox check options");
  desc.add_options()("server", po::value(&server), "kboxd URL (default $KBOX_URL, then $KBOX_SERVER)")(
      "token-file", po::value(&token_file), "file holding the API token (default $KBOX_TOKEN)")(
      "file", po::value(&file), "candidate .py to check (the positional FILE)")(
      "reference", po::value(&reference), "reference .py (optional: lets the checks know its names)")(
      "backend", po::value(&backend), "cpu, cuda or triton (default cpu)")(
      "precision", po::value(&precision), "fp32, fp16 or bf16 (default fp32)")(
      "profile", po::value(&profile), "anti-cheat profile (default: the server's)")(
      "rule", po::value(&rules), "ID=SEVERITY: override one anti-cheat rule (repeatable)")(
      "id", po::value(&request_id), "client request id")(
      "json", "print the response as proto3 JSON")("help,h", "print this help");
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Usage(e.what());
  }
  if (vm.count("help")) {
    std::cout << "usage: kbox check [--server URL] FILE [options]\n"
              << "Exit status: 0 nothing rejected; 1 rejected; 2 usage error or 4xx; "
                 "3 connection error or 5xx.\n"
              << desc;
    return 0;
  }
  if (file.empty()) return Usage("check: the candidate FILE is required");

  kbox::v1::CheckRequest req;
  if (!ReadFile(file, *req.mutable_candidate_source())) return Usage("cannot read " + file);
  if (!reference.empty() && !ReadFile(reference, *req.mutable_reference_source())) {
    return Usage("cannot read " + reference);
  }
  if (!Backends().contains(backend)) return Usage("unknown backend " + backend);
  if (!Precisions().contains(precision)) return Usage("unknown precision " + precision);
  req.set_backend(Backends().at(backend));
  req.set_precision(Precisions().at(precision));
  req.set_anticheat_profile(profile);
  if (auto e = ParseRules(rules, req.mutable_anticheat_overrides()); !e.empty()) return Usage(e);
  req.set_client_request_id(request_id);

  auto url = kbox::ParseServerUrl(server);
  if (!url) return Usage(url.error().message);
  auto token = kbox::ResolveToken(token_file);
  if (!token) return Usage(token.error().message);
  auto reply = kbox::HttpCall(*url, "POST", "/v1/check", "application/x-protobuf",
                              req.SerializeAsString(), kCheckTimeout, *token);
  if (!reply) {
    std::cerr << "kbox: " << reply.error().message << "\n";
    return kServerError;
  }
  if (reply->status != 200) return ReportHttpError(*reply);
  kbox::v1::CheckResponse response;
  if (!response.ParseFromString(reply->body)) {
    std::cerr << "kbox: the server's answer is not a CheckResponse\n";
    return kServerError;
  }
  std::cout << (vm.count("json") ? ToJson(response) + "\n" : kbox::SummarizeCheck(response));
  return response.rejected() ? kRejected : 0;
}

int Info(const std::vector<std::string>& args) {
  std::string server = DefaultServer(), token_file;
  po::options_description desc("kbox info options");
  desc.add_options()("server", po::value(&server), "kboxd URL")(
      "token-file", po::value(&token_file), "file holding the API token (default $KBOX_TOKEN)")(
      "json", "print raw JSON");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Usage(e.what());
  }
  auto url = kbox::ParseServerUrl(server);
  if (!url) return Usage(url.error().message);
  auto token = kbox::ResolveToken(token_file);
  if (!token) return Usage(token.error().message);
  auto reply = kbox::HttpCall(*url, "GET", "/v1/info", "", "", kInfoTimeout, *token);
  if (!reply) {
    std::cerr << "kbox: " << reply.error().message << "\n";
    return kServerError;
  }
  if (reply->status != 200) return ReportHttpError(*reply);
  kbox::v1::InfoResponse info;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(reply->body, &info, options).ok()) {
    std::cerr << "kbox: the server's answer is not an InfoResponse\n";
    return kServerError;
  }
  std::cout << ToJson(info) << "\n";
  return 0;
}

// `kbox eval-dir` is the Python client's (kbox_client/eval_dir.py: it needs
// the client's evaluate_many and writes a PNG): run it with the package found
// beside this binary, installed or in the source tree.
int EvalDir(const char* argv0, const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path base = ec ? fs::absolute(argv0).parent_path() : exe.parent_path();
  std::string package;
  for (const fs::path& dir : {base / "../share/kbox/python", base / "../../clients/python",
                              fs::path(KBOX_SOURCE_CLIENT_DIR)}) {
    if (fs::exists(dir / "kbox_client" / "eval_dir.py", ec)) {
      package = fs::canonical(dir, ec).string();
      break;
    }
  }
  if (package.empty()) return Usage("eval-dir: the Python client (kbox_client) is not installed");
  const char* old_path = std::getenv("PYTHONPATH");
  const std::string path = package + (old_path && *old_path ? ":" + std::string(old_path) : "");
  ::setenv("PYTHONPATH", path.c_str(), 1);
  const char* python = std::getenv("KBOX_PYTHON");
  if (python == nullptr || *python == '\0') python = "python3";
  std::vector<std::string> words = {python, "-m", "kbox_client.eval_dir"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  ::execvp(python, argv.data());
  std::cerr << "kbox: eval-dir: cannot run " << python << ": " << std::strerror(errno) << "\n";
  return kServerError;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage("missing command");
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "eval") return Eval(args);
  if (command == "check") return Check(args);
  if (command == "info") return Info(args);
  if (command == "eval-dir") return EvalDir(argv[0], args);
  if (command == "-h" || command == "--help" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  return Usage("unknown command " + command);
}
