#pragma once

// StageOutcome builders shared by the result mapper's tests
// (result_mapper_test.cc, failure_cause_test.cc): a process that ended one
// way, or a harness report with an outcome.

#include <signal.h>

#include <string>

#include "daemon/result_mapper.h"

namespace kbox::test_support {

// A stage whose process ended by `end` while `last_party`'s code ran, with
// the details that end carries (exit code, signal, spawn error, wall time).
inline StageOutcome Ended(ProcessOutcome::End end, v1::Party last_party) {
  using End = ProcessOutcome::End;
  StageOutcome s;
  s.process.end = end;
  s.last_party = last_party;
  s.candidate_ran = last_party == v1::CANDIDATE;
  if (end == End::kExited) s.process.exit_code = 1;
  if (end == End::kSignaled) s.process.term_signal = SIGSEGV;
  if (end == End::kSpawnFailed) s.process.spawn_error = "exec /py: No such file or directory";
  if (end == End::kTimedOut) s.process.wall_ms = 3500;
  return s;
}

// A stage that exited cleanly with a harness report of `outcome`.
inline StageOutcome Reported(v1::StageReport::Outcome outcome, const std::string& message = "msg") {
  StageOutcome s;
  s.process.end = ProcessOutcome::End::kExited;
  s.process.exit_code = 0;
  s.last_party = v1::HARNESS;
  s.report.emplace();
  s.report->set_outcome(outcome);
  s.report->set_message(message);
  return s;
}

}  // namespace kbox::test_support
