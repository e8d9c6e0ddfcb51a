#pragma once
// Whole-file reads and all-or-nothing writes. A reader never sees a half-written vkattn output:
// PendingFile writes to a temporary name beside the target, and only commit() renames it into
// place; a PendingFile destroyed uncommitted (an error on the way) removes its temporary.
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace vkattn::io {

// The file's bytes; FileError "PATH: …" when it is missing, a directory, or unreadable.
std::vector<std::byte> read_file(const std::filesystem::path& path);
// The same bytes as a string (a text file's: JSON, a vocabulary).
std::string read_text(const std::filesystem::path& path);

// Throws the FileError a later write to `path` would meet, before any work is done: its
// directory is missing, or `path` is a directory.
void check_output_path(const std::filesystem::path& path);

class PendingFile {
 public:
  // Writes `bytes` to a temporary file in the target's directory; FileError when that fails
  // (the directory is missing or not writable, the disk is full).
  PendingFile(std::filesystem::path target, std::span<const std::byte> bytes);
  ~PendingFile();
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  PendingFile(PendingFile&& other) noexcept;
  PendingFile& operator=(PendingFile&&) = delete;

  // Renames the temporary onto the target (atomic on one file system).
  void commit();
  const std::filesystem::path& target() const { return target_; }

 private:
  std::filesystem::path target_;
  std::filesystem::path temporary_;
  bool pending_ = false;
};

// A PendingFile committed at once.
void write_file(const std::filesystem::path& path, std::span<const std::byte> bytes);

}  // namespace vkattn::io
