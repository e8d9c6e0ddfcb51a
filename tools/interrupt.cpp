#include "tools/interrupt.h"

#include <atomic>
#include <csignal>
#include <cstdio>

#include "vkattn/errors.h"

namespace vkattn::cli {

namespace {

volatile std::sig_atomic_t interrupted = 0;

void on_sigint(int) {
  interrupted = 1;
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process at once
}

}  // namespace

void stop_if_interrupted() {
  if (interrupted) throw Interrupted("interrupted (Ctrl-C): nothing was written");
}

void watch(Backend& backend) {
  std::signal(SIGINT, on_sigint);
  backend.on_progress([last = -1.0](const Backend::Progress& p) mutable {
    if (interrupted) {
      char text[160];
      std::snprintf(text, sizeof text, "interrupted (Ctrl-C) after %.0f%% of %s: nothing was written", 100 * p.done,
                    p.step.c_str());
      throw Interrupted(text);
    }
    if (p.seconds < 2 || (last >= 0 && p.seconds - last < 2)) return;
    last = p.seconds;
    std::fprintf(stderr, "  %s: %.0f%% after %.1f s\n", p.step.c_str(), 100 * p.done, p.seconds);
  });
}

}  // namespace vkattn::cli
