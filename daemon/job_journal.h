#pragma once

// The durable job journal (config job_store_dir): every job accepted by
// POST /v1/jobs, and its result once done, on disk, so that a restarted
// kboxd serves the same results under the same ids and keys and runs the
// jobs that were accepted but not finished (with the seed drawn the first
// time).
//
// One file per job, <job_id>.job, replaced whole: written to a temporary
// name, fsync'ed, renamed over the old one, and the directory fsync'ed. A
// file per job rather than one append-only log because every operation the
// store needs is then one filesystem operation: a result replaces the
// accepted record, an expired result is one unlink, and the journal's size
// is the store's (result_ttl_s, max_stored_jobs) with no compaction. A rename
// is atomic, so a crash leaves the old record or the new one; each file still
// carries a length and a CRC-32 of its payload, so a record damaged anyway
// (a filesystem that reorders, a disk, a hand) is detected, logged, counted
// and skipped, never trusted and never fatal.
//
// File layout: "KBJ1", payload length (u32 LE), CRC-32 of the payload
// (u32 LE), payload (a serialized v1::JournalRecord).

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <boost/system/result.hpp>

#include "kbox/v1/journal.pb.h"

namespace kbox {

// Milliseconds since the Unix epoch: the journal's clock (steady_clock does
// not survive a restart).
int64_t UnixMillis();

// The bytes of a journal file holding `record`.
std::string EncodeJournalRecord(const v1::JournalRecord& record);
// The record in `bytes`, or why they are not one (torn, bad checksum, ...).
boost::system::result<v1::JournalRecord, std::string> DecodeJournalRecord(const std::string& bytes);

class JobJournal {
 public:
  // Creates `dir` when missing; an error when it cannot be made or written.
  static boost::system::result<std::unique_ptr<JobJournal>, std::string> Open(
      const std::filesystem::path& dir);

  // Writes the records (each replacing any earlier one of its job) and
  // returns once all are durable, or an error (some may have been written:
  // the caller removes them).
  boost::system::result<void, std::string> Write(const std::vector<const v1::JournalRecord*>& records);
  boost::system::result<void, std::string> Write(const v1::JournalRecord& record) {
    return Write(std::vector<const v1::JournalRecord*>{&record});
  }

  // Forgets a job (its result expired, or its submission was withdrawn).
  void Remove(const std::string& job_id);

  struct Loaded {
    std::vector<v1::JournalRecord> records;
    // "<file>: <why>" for each record that could not be read; the file is
    // deleted (it can never become readable).
    std::vector<std::string> corrupt;
  };
  // Every record on disk. Leftover temporary files (a crash mid-write) are
  // deleted: their rename never happened, so the job's previous record, if
  // any, is the one in force.
  Loaded Load();

  const std::filesystem::path& dir() const { return dir_; }

  ~JobJournal();
  JobJournal(const JobJournal&) = delete;
  JobJournal& operator=(const JobJournal&) = delete;

 private:
  JobJournal(std::filesystem::path dir, int dir_fd) : dir_(std::move(dir)), dir_fd_(dir_fd) {}
  std::filesystem::path PathOf(const std::string& job_id) const;

  const std::filesystem::path dir_;
  const int dir_fd_;  // Held open for the directory fsyncs.
};

}  // namespace kbox
