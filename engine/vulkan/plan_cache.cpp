#include "engine/vulkan/plan_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "engine/vulkan/shader_registry.h"
#include "vkattn/version.h"

namespace vkattn::vulkan {
namespace {

constexpr int kFormat = 1;

std::string hex(uint64_t value, int digits) {
  char text[17];
  std::snprintf(text, sizeof text, "%0*llx", digits, static_cast<unsigned long long>(value));
  return text;
}

uint32_t name_hash(const std::string& name) {
  uint32_t h = 2166136261u;  // FNV-1a, 32 bits
  for (char c : name) h = (h ^ uint8_t(c)) * 16777619u;
  return h;
}

// An exclusive flock on `path` for the life of the object (none when the file cannot be made).
class FileLock {
 public:
  explicit FileLock(const std::filesystem::path& path) : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};

}  // namespace

PlanCacheKey PlanCacheKey::of(const DeviceReport& device) {
  return {device.name, device.uuid, driver_string(device),
          std::string(VKATTN_VERSION_STRING) + "+" + hex(shaders_fingerprint(), 16)};
}

nlohmann::json PlanCacheKey::to_json() const {
  return {{"format", kFormat}, {"device", device}, {"uuid", uuid}, {"driver", driver}, {"build", build}};
}

std::filesystem::path PlanCache::default_directory() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/') return std::filesystem::path(xdg) / "vkattn";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "vkattn";
  return {};
}

PlanCache::PlanCache(PlanCacheKey key, std::filesystem::path directory) : key_(std::move(key)) {
  if (directory.empty()) directory = default_directory();
  if (!directory.empty()) {
    file_ = directory / ("plans-" + (key_.uuid.empty() ? std::string("unknown") : key_.uuid) + "-" +
                         hex(name_hash(key_.device), 8) + ".json");
  }
}

void PlanCache::warn_locked(const std::string& text) {
  spdlog::warn("plan cache: {}", text);
  warnings_.push_back(text);
}

std::vector<std::string> PlanCache::warnings() const {
  std::lock_guard lock(mutex_);
  return warnings_;
}

std::map<std::string, nlohmann::json> PlanCache::read_file_locked(bool say_why) {
  std::map<std::string, nlohmann::json> plans;
  auto ignored = [&](const std::string& why) {
    if (say_why) warn_locked(why);
    return std::map<std::string, nlohmann::json>{};
  };
  std::error_code error;
  if (file_.empty() || !std::filesystem::exists(file_, error)) return plans;
  std::ifstream in(file_, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return ignored(file_.string() + " cannot be read; its plans will be measured again");
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return ignored(file_.string() +
                   " is not valid JSON (truncated or corrupt): ignored, its plans will be measured again");
  }
  if (!doc.is_object() || doc.value("format", 0) != kFormat || !doc.contains("plans") || !doc["plans"].is_object()) {
    return ignored(file_.string() + " is not a vkattn plan cache of format " + std::to_string(kFormat) +
                   ": ignored, its plans will be measured again");
  }
  const nlohmann::json want = key_.to_json();
  for (const char* field : {"device", "uuid", "driver", "build"}) {
    if (doc.value(field, std::string()) != want[field].get<std::string>()) {
      return ignored(file_.string() + " was tuned for another " + field + " (" + doc.value(field, std::string("none")) +
                     ", this is " + want[field].get<std::string>() + "): its plans will be measured again");
    }
  }
  for (const auto& [shape_class, entry] : doc["plans"].items()) {
    if (entry.is_object()) plans[shape_class] = entry;
  }
  return plans;
}

void PlanCache::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  plans_ = read_file_locked();
}

std::optional<nlohmann::json> PlanCache::find(const std::string& shape_class) {
  std::lock_guard lock(mutex_);
  load_locked();
  auto it = plans_.find(shape_class);
  if (it == plans_.end()) return std::nullopt;
  return it->second;
}

std::map<std::string, nlohmann::json> PlanCache::entries() {
  std::lock_guard lock(mutex_);
  load_locked();
  return plans_;
}

void PlanCache::forget(const std::string& shape_class) {
  std::lock_guard lock(mutex_);
  plans_.erase(shape_class);
}

void PlanCache::remember(const std::string& shape_class, const nlohmann::json& entry) {
  std::lock_guard lock(mutex_);
  load_locked();
  plans_[shape_class] = entry;
  if (file_.empty() || unwritable_) return;
  auto cannot = [&](const std::string& why) {
    unwritable_ = true;
    warn_locked("cannot write " + file_.string() + " (" + why + "): plans are kept for this process only");
  };
  std::error_code error;
  std::filesystem::create_directories(file_.parent_path(), error);
  if (error) return cannot(error.message());
  // Another process may have tuned other classes since this one read the file: merge under the
  // lock, this process's entries winning, then replace the file whole.
  FileLock lock_file(file_.string() + ".lock");
  if (!lock_file.held()) return cannot(std::strerror(errno));
  // (what was wrong with the file was said when it was loaded: the file is now replaced, silently)
  std::map<std::string, nlohmann::json> merged = read_file_locked(/*say_why=*/false);
  for (const auto& [name, plan] : plans_) merged[name] = plan;
  nlohmann::json doc = key_.to_json();
  doc["plans"] = merged;
  static std::atomic<uint64_t> serial = 0;
  const std::filesystem::path temporary =
      file_.string() + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(serial++);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << doc.dump(2) << "\n";
    out.flush();
    if (!out) {
      std::filesystem::remove(temporary, error);
      return cannot("writing failed");
    }
  }
  std::filesystem::rename(temporary, file_, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    return cannot(error.message());
  }
  plans_ = std::move(merged);
}

std::shared_ptr<PlanCache> plan_cache(const DeviceReport& device, const std::filesystem::path& directory) {
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<PlanCache>> caches;
  auto cache = std::make_shared<PlanCache>(PlanCacheKey::of(device), directory);
  std::lock_guard lock(mutex);
  const std::string id = cache->file().empty() ? "memory:" + device.uuid + device.name : cache->file().string();
  if (auto existing = caches[id].lock()) return existing;
  caches[id] = cache;
  return cache;
}

}  // namespace vkattn::vulkan
