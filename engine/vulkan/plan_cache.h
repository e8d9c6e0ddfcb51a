#pragma once
// PlanCache: the plans that tuning chose on one device (engine/backends/tuner.h), remembered on
// disk so that each shape class is measured once per device, driver and vkattn build.
//
// One JSON file per device, under $XDG_CACHE_HOME/vkattn (else ~/.cache/vkattn):
//   plans-<deviceUUID>-<hash of the device's name>.json
//   {"format": 1, "device": "llvmpipe (LLVM 15.0.6, 256 bits)", "uuid": "…",
//    "driver": "llvmpipe, Mesa 22.3.6 (LLVM 15.0.6), driverVersion 0x00000001",
//    "build": "0.1.0+<fingerprint of every shader's SPIR-V>",
//    "plans": {"<shape class>": {"plan": {…}, "describe": "…", "measured_ms": {…}, …}}}
// (lavapipe's UUID is the same at every vector width, and its name is not: both are in the file's
// name.) Nothing in it is trusted blindly: a file that is not JSON, or not this format, is
// ignored with a warning; one written for another driver or build is ignored (its plans are
// measured again, as after a driver update); the caller checks every plan against the device
// before using it. Writes merge with what other processes wrote meanwhile (under an flock on
// <file>.lock) and replace the file by rename, so that no reader sees half a file. A directory
// that cannot be written is one warning: the plans then live in this process only.
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/vulkan/context.h"

namespace vkattn::vulkan {

struct PlanCacheKey {
  std::string device;  // the device's name
  std::string uuid;    // DeviceReport::uuid
  std::string driver;  // driver_string()
  std::string build;   // vkattn's version + "+" + shaders_fingerprint() in hex
  static PlanCacheKey of(const DeviceReport& device);
  nlohmann::json to_json() const;
};

class PlanCache {
 public:
  // The cache of `key`'s device in `directory` (empty: default_directory()); reads the file at
  // first use.
  explicit PlanCache(PlanCacheKey key, std::filesystem::path directory = {});
  // $XDG_CACHE_HOME/vkattn, else $HOME/.cache/vkattn; empty when neither variable is set.
  static std::filesystem::path default_directory();

  // The file, or empty when there is no directory to keep it in.
  const std::filesystem::path& file() const { return file_; }

  // The entry remembered for `shape_class`, if any.
  std::optional<nlohmann::json> find(const std::string& shape_class);
  // Remembers `entry` for `shape_class`, here and in the file.
  void remember(const std::string& shape_class, const nlohmann::json& entry);
  // Every remembered entry, by shape class.
  std::map<std::string, nlohmann::json> entries();
  // Forgets an entry that the device refused (it stays in the file until overwritten).
  void forget(const std::string& shape_class);
  // What was wrong with the file or its directory, one line each, also logged as warnings.
  std::vector<std::string> warnings() const;

 private:
  void load_locked();
  // The plans in the file now, if it is this key's and readable; otherwise none, with a warning
  // where `say_why`.
  std::map<std::string, nlohmann::json> read_file_locked(bool say_why = true);
  void warn_locked(const std::string& text);

  PlanCacheKey key_;
  std::filesystem::path file_;
  mutable std::mutex mutex_;
  bool loaded_ = false;
  bool unwritable_ = false;
  std::map<std::string, nlohmann::json> plans_;
  std::vector<std::string> warnings_;
};

// The process's one PlanCache for `device` in `directory` (empty: the default), shared by every
// backend on the device, so that a class tuned by one is known to all.
std::shared_ptr<PlanCache> plan_cache(const DeviceReport& device, const std::filesystem::path& directory = {});

}  // namespace vkattn::vulkan
