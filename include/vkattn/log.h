#pragma once
// Logging through spdlog to stderr. VKATTN_LOG sets the level (trace, debug, info, warn, error,
// off; default warn). Called by every Context; safe to call again.
namespace vkattn {

void init_logging();

}  // namespace vkattn
