#pragma once
// Progress and Ctrl-C for the command line's passes. A long step runs as several submissions
// (VulkanBackendOptions::max_submission_seconds); between them, once a pass has run for 2 s, a
// line on stderr says how far the step is, every 2 s at most. Ctrl-C stops the pass at the next
// submission boundary (Interrupted: one line, exit 130), or, where none comes, before any output
// file is written; a second Ctrl-C ends the process at once.
#include "vkattn/backends/backend.h"

namespace vkattn::cli {

// Reports `backend`'s progress and lets Ctrl-C stop its passes (installs the SIGINT handler).
void watch(Backend& backend);
// Throws Interrupted when Ctrl-C was pressed: call it before writing outputs.
void stop_if_interrupted();

}  // namespace vkattn::cli
