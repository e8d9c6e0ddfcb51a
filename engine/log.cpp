#include "vkattn/log.h"

#include <spdlog/cfg/helpers.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <mutex>

namespace vkattn {

void init_logging() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto logger = spdlog::stderr_color_mt("vkattn");
    logger->set_pattern("[vkattn %^%l%$] %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::warn);
    if (const char* level = std::getenv("VKATTN_LOG")) spdlog::cfg::helpers::load_levels(level);
  });
}

}  // namespace vkattn
