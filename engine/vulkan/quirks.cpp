#include "engine/vulkan/quirks.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <optional>

#include "engine/vulkan/context.h"
#include "vkattn/errors.h"

namespace vkattn::vulkan {
namespace {

// The table. A row names one driver's versions and the switch it turns off there, with what went
// wrong without it. It is empty: the drivers known to run narrower subgroups than they report
// (Intel's ANV, RADV, MoltenVK, Turnip) need no row, because no kernel counts lanes that the
// device does not guarantee through subgroup size control (lanes.h). Add a row when a driver is
// seen to compute wrong results, hang or crash in a kernel family; the environment variable of the
// switch lets a user turn it off before a row exists, and back on to test a fix.
// A row: {vendor_id, vk::DriverId::e…, min_driver_version, max_driver_version, Switch::…, "why"}
constexpr std::array<Quirk, 0> kQuirks{};

std::optional<bool> parse_switch(const char* variable, const char* value) {
  if (!value) return std::nullopt;
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "on" || v == "1" || v == "true" || v == "yes") return true;
  if (v == "off" || v == "0" || v == "false" || v == "no") return false;
  throw ConfigError(std::string(variable) + "='" + value + "': expected on or off");
}

bool matches(const Quirk& q, const DeviceReport& d) {
  return (q.vendor_id == 0 || q.vendor_id == d.vendor_id) && q.driver == d.driver_id &&
         d.driver_version >= q.min_driver_version && d.driver_version <= q.max_driver_version;
}

}  // namespace

const char* switch_name(Switch what) { return what == Switch::subgroups ? "subgroups" : "texel_inputs"; }

std::span<const Quirk> driver_quirks() { return kQuirks; }

Switches choose_switches(const DeviceReport& device, std::span<const Quirk> quirks, const EnvReader& env) {
  Switches s;
  for (const Quirk& q : quirks) {
    if (!matches(q, device)) continue;
    const std::string why = "driver quirk (" + driver_string(device) + "): " + q.why;
    if (q.what == Switch::subgroups) s.subgroups = false, s.subgroups_why = why;
    if (q.what == Switch::texel_inputs) s.texel_inputs = false, s.texel_inputs_why = why;
  }
  auto read = [&](const char* name) { return env ? env(name) : std::getenv(name); };
  if (auto on = parse_switch("VKATTN_SUBGROUPS", read("VKATTN_SUBGROUPS"))) {
    s.subgroups = *on;
    s.subgroups_why = *on ? "" : "VKATTN_SUBGROUPS=off";
  }
  if (auto on = parse_switch("VKATTN_TEXEL_INPUTS", read("VKATTN_TEXEL_INPUTS"))) {
    s.texel_inputs = *on;
    s.texel_inputs_why = *on ? "" : "VKATTN_TEXEL_INPUTS=off";
  }
  return s;
}

}  // namespace vkattn::vulkan
