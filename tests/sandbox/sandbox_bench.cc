// kbox-sandbox-bench: the sandbox's set-up cost per stage, in milliseconds:
// the same trivial program run N times directly and N times under
// kbox-sandbox with the run profile, through the same process runner kboxd
// uses. Prints the medians and their difference.
//
//   kbox-sandbox-bench SANDBOX_BIN POLICY_DIR [RUNS]

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kbox/v1/sandbox.pb.h"
#include "tests/sandbox/minimal_spec.h"
#include "worker/process_runner.h"

namespace {

namespace fs = std::filesystem;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: kbox-sandbox-bench SANDBOX_BIN POLICY_DIR [RUNS]\n");
    return 2;
  }
  const std::string sandbox_bin = fs::absolute(argv[1]).string();
  const std::string policy_dir = fs::absolute(argv[2]).string();
  const int runs = argc > 3 ? std::atoi(argv[3]) : 30;

  char tmpl[] = "/tmp/kbox-sandbox-bench-XXXXXX";
  if (!::mkdtemp(tmpl)) return 1;
  const fs::path dir = tmpl;
  ::chmod(dir.c_str(), 0711);
  fs::create_directories(dir / "root");
  fs::create_directories(dir / "scratch");
  ::chown((dir / "scratch").c_str(), 65534, 65534);

  const kbox::v1::SandboxSpec spec =
      kbox::MinimalSandboxSpec({"/bin/true"}, dir / "root", dir / "scratch", policy_dir);
  const fs::path spec_file = dir / "spec.pb";
  {
    std::ofstream out(spec_file, std::ios::binary);
    spec.SerializeToOstream(&out);
  }

  kbox::ProcessSpec direct;
  direct.argv = {"/bin/true"};
  kbox::ProcessSpec sandboxed;
  sandboxed.argv = {sandbox_bin, "--spec", spec_file.string()};

  std::vector<double> direct_ms, sandboxed_ms;
  int failures = 0;
  for (int i = 0; i < runs; ++i) {
    const auto a = kbox::RunProcess(direct);
    const auto b = kbox::RunProcess(sandboxed);
    if (b.end != kbox::ProcessOutcome::End::kExited || b.exit_code != 0) {
      ++failures;
      std::fprintf(stderr, "sandboxed run %d: %s: %s\n", i, kbox::DescribeEnd(b).c_str(),
                   b.output_tail.c_str());
    }
    direct_ms.push_back(a.wall_ms);
    sandboxed_ms.push_back(b.wall_ms);
  }
  const double d = Median(direct_ms), s = Median(sandboxed_ms);
  std::printf("sandbox set-up per stage: median %.2f ms sandboxed vs %.2f ms direct = %.2f ms "
              "(/bin/true, %d runs, %d failures)\n", s, d, s - d, runs, failures);
  std::error_code ec;
  fs::remove_all(dir, ec);
  return failures == 0 ? 0 : 1;
}
