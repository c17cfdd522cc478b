// kbox: command-line client of kboxd.
//
//   kbox eval --server URL --reference R.py --candidate C.py [--backend cpu|cuda|triton]
//             [--profile NAME] [--rule ID=SEVERITY ...] [--json]
//   kbox check FILE [--reference R.py] [--backend ...] [--precision ...] [--profile NAME]
//             [--rule ID=SEVERITY ...] [--json]
//   kbox info --server URL [--json]
//   kbox jobs [--state QUEUED|RUNNING|DONE]      the caller's jobs (GET /v1/jobs)
//   kbox cancel JOB_ID                           DELETE /v1/jobs/<id>
//
// Every command takes --token-file PATH (else $KBOX_TOKEN): the API token
// kboxd wants when it has api_tokens_file (docs/api.md); and --ca-file PATH
// (else $KBOX_CA_FILE) for an https:// server whose certificate the system's
// CAs do not sign.
//
// Exit status: 0 when the server answered with a result (a wrong kernel is a
// result, not a failure; for `check`: no verdict rejects); 1 (`check` only)
// when an anti-cheat rule rejects the candidate; 2 for usage errors and
// requests the server refused as malformed (4xx); 3 when the server could not
// be reached or failed (5xx).

#include <unistd.h>

#include <boost/program_options.hpp>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <algorithm>
#include <initializer_list>
#include <map>
#include <optional>
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
    "       kbox jobs [--server URL] [--state QUEUED|RUNNING|DONE]\n"
    "       kbox cancel [--server URL] JOB_ID\n"
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
    "--ca-file PATH (every command): PEM CAs for an https:// server (else $KBOX_CA_FILE,\n"
    "  else the system's); the server's name is checked against its certificate.\n"
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

std::string EnvOr(const char* name, const char* otherwise) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : otherwise;
}

// Where and how every command reaches kboxd: the same options, the same
// environment variables as the Python client.
struct Connection {
  std::string server = DefaultServer();
  std::string token_file;
  std::string ca_file = EnvOr("KBOX_CA_FILE", "");
  kbox::ServerUrl url;
  std::string token;

  void AddOptions(po::options_description& desc) {
    desc.add_options()("server", po::value(&server), "kboxd URL (default $KBOX_URL, then $KBOX_SERVER)")(
        "token-file", po::value(&token_file), "file holding the API token (default $KBOX_TOKEN)")(
        "ca-file", po::value(&ca_file), "PEM CAs of an https:// server (default $KBOX_CA_FILE)");
  }
  // Resolves the URL and the token; an error message when they are wrong.
  std::string Resolve() {
    auto parsed = kbox::ParseServerUrl(server);
    if (!parsed) return parsed.error().message;
    url = *parsed;
    url.ca_file = ca_file;
    auto resolved = kbox::ResolveToken(token_file);
    if (!resolved) return resolved.error().message;
    token = *resolved;
    return "";
  }
  boost::system::result<kbox::HttpReply, kbox::ClientError> Call(const std::string& method,
                                                                 const std::string& target,
                                                                 const std::string& content_type,
                                                                 const std::string& body,
                                                                 std::chrono::seconds timeout) const {
    return kbox::HttpCall(url, method, target, content_type, body, timeout, token);
  }
};

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
  Connection conn;
  std::string reference, candidate, backend = "cpu", precision = "fp32";
  unsigned trials = 0, time_limit = 0, perf_trials = 0;
  int64_t seed = -1;
  double speedup_precision = -1;
  std::string request_id, profile;
  std::vector<std::string> rules;
  po::options_description desc("kbox eval options");
  conn.AddOptions(desc);
  desc.add_options()(
      "reference", po::value(&reference), "reference .py (class Model, get_inputs, get_init_inputs)")(
      "candidate", po::value(&candidate), "candidate .py (class ModelNew)")(
      "backend", po::value(&backend), "cpu, cuda or triton (default cpu)")(
      "precision", po::value(&precision), "fp32, fp16 or bf16 (default fp32)")(
      "trials", po::value(&trials), "correctness trials (default: server's, 5)")(
      "seed", po::value(&seed), "seed (default: drawn by the server)")(
      "perf-trials", po::value(&perf_trials), "timed calls per model")(
      "speedup-precision", po::value(&speedup_precision),
      "stop timing once the speedup's interval is within this share of it (default: server's, 0.05)")(
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
  if (vm.count("speedup-precision")) req.set_speedup_precision(speedup_precision);
  req.set_time_limit_s(time_limit);
  req.set_client_request_id(request_id);

  if (auto error = conn.Resolve(); !error.empty()) return Usage(error);
  auto reply = conn.Call("POST", "/v1/evaluate", "application/x-protobuf", req.SerializeAsString(),
                         kEvalTimeout);
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
  Connection conn;
  std::string file, reference, backend = "cpu", precision = "fp32";
  std::string profile, request_id;
  std::vector<std::string> rules;
  po::options_description desc("kbox check options");
  conn.AddOptions(desc);
  desc.add_options()(
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

  if (auto error = conn.Resolve(); !error.empty()) return Usage(error);
  auto reply = conn.Call("POST", "/v1/check", "application/x-protobuf", req.SerializeAsString(),
                         kCheckTimeout);
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

// Parses a command's options (`desc`, to which the connection's and --help
// are added) and resolves the connection; the exit status when the command
// ends here (a usage error, --help), else nullopt.
std::optional<int> ParseSimple(const std::vector<std::string>& args, Connection& conn,
                               po::options_description& desc,
                               const po::positional_options_description& positional,
                               po::variables_map& vm, const std::string& usage) {
  conn.AddOptions(desc);
  desc.add_options()("help,h", "print this help");
  try {
    po::store(po::command_line_parser(args).options(desc).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    return Usage(e.what());
  }
  if (vm.count("help")) {
    std::cout << usage << "\n" << desc;
    return 0;
  }
  if (auto error = conn.Resolve(); !error.empty()) return Usage(error);
  return std::nullopt;
}

// A JSON answer of the server printed as it came; the exit status.
int PrintJsonReply(const boost::system::result<kbox::HttpReply, kbox::ClientError>& reply,
                   std::initializer_list<unsigned> ok) {
  if (!reply) {
    std::cerr << "kbox: " << reply.error().message << "\n";
    return kServerError;
  }
  if (std::find(ok.begin(), ok.end(), reply->status) == ok.end()) return ReportHttpError(*reply);
  std::cout << reply->body << "\n";
  return 0;
}

int Info(const std::vector<std::string>& args) {
  Connection conn;
  po::options_description desc("kbox info options");
  desc.add_options()("json", "accepted for compatibility: the answer is always JSON");
  po::variables_map vm;
  if (auto done = ParseSimple(args, conn, desc, {}, vm, "usage: kbox info [--server URL]")) return *done;
  auto reply = conn.Call("GET", "/v1/info", "", "", kInfoTimeout);
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

int Jobs(const std::vector<std::string>& args) {
  Connection conn;
  std::string state;
  po::options_description desc("kbox jobs options");
  desc.add_options()("state", po::value(&state), "QUEUED, RUNNING or DONE (default: all)");
  po::variables_map vm;
  if (auto done = ParseSimple(args, conn, desc, {}, vm,
                              "usage: kbox jobs [--server URL] [--state QUEUED|RUNNING|DONE]\n"
                              "Prints the caller's jobs (JobList JSON).")) {
    return *done;
  }
  return PrintJsonReply(conn.Call("GET", state.empty() ? "/v1/jobs" : "/v1/jobs?state=" + state, "",
                                  "", kInfoTimeout),
                        {200});
}

int Cancel(const std::vector<std::string>& args) {
  Connection conn;
  std::string job_id;
  po::options_description desc("kbox cancel options");
  desc.add_options()("job", po::value(&job_id), "the job's id (the positional JOB_ID)");
  po::positional_options_description positional;
  positional.add("job", 1);
  po::variables_map vm;
  if (auto done = ParseSimple(args, conn, desc, positional, vm,
                              "usage: kbox cancel [--server URL] JOB_ID\n"
                              "Cancels a submitted job; prints its status (JobStatus JSON). A job "
                              "that already ended otherwise is a 409 (exit 2).")) {
    return *done;
  }
  const bool plain = std::all_of(job_id.begin(), job_id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (job_id.empty() || !plain) return Usage("cancel: a JOB_ID (letters, digits, '-', '_', '.') is required");
  return PrintJsonReply(conn.Call("DELETE", "/v1/jobs/" + job_id, "", "", kInfoTimeout), {200, 202});
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
  if (command == "jobs") return Jobs(args);
  if (command == "cancel") return Cancel(args);
  if (command == "eval-dir") return EvalDir(argv[0], args);
  if (command == "-h" || command == "--help" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  return Usage("unknown command " + command);
}
