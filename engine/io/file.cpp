#include "engine/io/file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <system_error>

#include "vkattn/errors.h"

namespace vkattn::io {

namespace fs = std::filesystem;

static FileError file_error(const fs::path& path, const std::string& what) {
  return FileError(path.string() + ": " + what);
}

std::vector<std::byte> read_file(const fs::path& path) {
  std::error_code ec;
  auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) throw file_error(path, "no such file");
  if (fs::is_directory(status)) throw file_error(path, "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw file_error(path, std::string("cannot open: ") + std::strerror(errno));
  in.seekg(0, std::ios::end);
  auto size = static_cast<std::streamoff>(in.tellg());
  if (size < 0) throw file_error(path, "cannot tell its size");
  in.seekg(0);
  std::vector<std::byte> bytes(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  if (in.gcount() != size) throw file_error(path, "read failed part-way");
  return bytes;
}

std::string read_text(const fs::path& path) {
  const std::vector<std::byte> bytes = read_file(path);
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void check_output_path(const fs::path& path) {
  fs::path directory = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  std::error_code ec;
  if (path.empty()) throw FileError("an output path is empty");
  if (!fs::is_directory(directory, ec)) throw file_error(path, "its directory does not exist");
  if (fs::is_directory(path, ec)) throw file_error(path, "is a directory, not a file");
}

PendingFile::PendingFile(fs::path target, std::span<const std::byte> bytes) : target_(std::move(target)) {
  check_output_path(target_);
  std::error_code ec;
  temporary_ = target_;
  temporary_ += ".tmp-" + std::to_string(::getpid());
  std::ofstream out(temporary_, std::ios::binary | std::ios::trunc);
  if (!out) throw file_error(target_, std::string("cannot write: ") + std::strerror(errno));
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    fs::remove(temporary_, ec);  // the destructor does not run for a constructor that throws
    throw file_error(target_, "write failed (disk full?)");
  }
  pending_ = true;
}

PendingFile::PendingFile(PendingFile&& other) noexcept
    : target_(std::move(other.target_)), temporary_(std::move(other.temporary_)), pending_(other.pending_) {
  other.pending_ = false;
}

PendingFile::~PendingFile() {
  if (!pending_) return;
  std::error_code ignored;
  fs::remove(temporary_, ignored);
}

void PendingFile::commit() {
  std::error_code ec;
  fs::rename(temporary_, target_, ec);
  if (ec) throw file_error(target_, "cannot rename the finished file into place: " + ec.message());
  pending_ = false;
}

void write_file(const fs::path& path, std::span<const std::byte> bytes) { PendingFile(path, bytes).commit(); }

}  // namespace vkattn::io
