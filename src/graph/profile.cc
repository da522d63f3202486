#include "graph/profile.h"

#include <algorithm>
#include <cstdio>

namespace cohort {
namespace {

std::string row(const std::string& name, const std::string& kind, const std::string& fwd, const std::string& bwd,
                const std::string& reorder, const std::string& total) {
  char line[256];
  std::snprintf(line, sizeof line, "%-28.28s %-16.16s %10s %10s %10s %10s\n", name.c_str(), kind.c_str(), fwd.c_str(),
                bwd.c_str(), reorder.c_str(), total.c_str());
  return line;
}

std::string ms(double seconds, double steps) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f", 1e3 * seconds / steps);
  return text;
}

}  // namespace

std::string format_profile(const Profile& p) {
  const int64_t passes = std::max(p.plan.forwards, p.plan.backwards);
  const double n = static_cast<double>(p.steps > 0 ? p.steps : std::max<int64_t>(passes, 1));
  std::string out = "profile: " + std::to_string(static_cast<int64_t>(n)) + " steps, milliseconds per step\n";
  out += row("layer", "kind", "forward", "backward", "reorder", "total");
  out += std::string(89, '-') + "\n";
  backend::LayerTime sum;
  for (size_t i = 0; i < p.names.size(); ++i) {
    const backend::LayerTime t = i < p.plan.layers.size() ? p.plan.layers[i] : backend::LayerTime{};
    out += row(p.names[i], p.kinds[i], ms(t.forward, n), ms(t.backward, n), ms(t.reorder, n),
               ms(t.forward + t.backward + t.reorder, n));
    sum.forward += t.forward;
    sum.backward += t.backward;
    sum.reorder += t.reorder;
  }
  out += std::string(89, '-') + "\n";
  const double layers = sum.forward + sum.backward + sum.reorder;
  out += row("all layers", "", ms(sum.forward, n), ms(sum.backward, n), ms(sum.reorder, n), ms(layers, n));
  out += row("optimizer", "", "", "", "", ms(p.optimizer_s, n));
  const double total = layers + p.optimizer_s;
  out += row("profiled total", "", "", "", "", ms(total, n));
  if (p.steps > 0 && p.plan.device_timed) {
    // The device's time in the layers' kernels against the step's wall time: the rest is
    // the step outside them (staging, the update, the exchange, launch and host overhead).
    char share[64];
    std::snprintf(share, sizeof share, "   (%.0f%% of the step)",
                  p.step_s > 0 ? 100 * std::max(0.0, p.step_s - layers) / p.step_s : 0.0);
    std::string line = row("outside the layers' kernels", "", "", "", "", ms(std::max(0.0, p.step_s - layers), n));
    line.pop_back();
    out += line + share + "\n";
  }
  if (p.steps > 0) {
    char share[64];
    std::snprintf(share, sizeof share, "   (the profile accounts for %.0f%%)",
                  p.step_s > 0 ? 100 * total / p.step_s : 0.0);
    std::string line = row("measured step time", "", "", "", "", ms(p.step_s, n));
    line.pop_back();
    out += line + share + "\n";
  }
  return out;
}

}  // namespace cohort
