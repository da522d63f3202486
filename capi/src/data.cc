// The extern "C" shim of the dataset tools (cohort/data.h).
#include "cohort/data.h"

#include "data/tools.h"
#include "handles.h"
#include "shim.h"

using namespace cohort;
using capi::guard;
using capi::need;

namespace {

data::Report reporter(cohort_data_report_fn fn, void* user) {
  return [fn, user](const std::string& line) {
    if (fn) fn(line.c_str(), user);
  };
}

}  // namespace

extern "C" {

COHORT_API cohort_status_t cohort_data_pack(const cohort_config_t* config, const char* image_dir, const char* out_dir,
                                            int shards, cohort_data_report_fn report, void* user, int64_t* written) {
  return guard("cohort_data_pack", [&] {
    need(image_dir, "image_dir");
    need(out_dir, "out_dir");
    Config cfg = config ? config->config : Config{};
    auto r = data::pack_folder(cfg, image_dir, out_dir, shards, reporter(report, user));
    if (written) *written = r.written;
  });
}

COHORT_API cohort_status_t cohort_data_inspect(const cohort_config_t* config, const char* path, int64_t limit,
                                               cohort_data_report_fn report, void* user) {
  return guard("cohort_data_inspect", [&] {
    need(path, "path");
    need(report, "report");
    require(limit >= 0, "limit must not be negative");
    Config cfg = config ? config->config : Config{};
    data::inspect_source(cfg, path, limit, reporter(report, user));
  });
}

COHORT_API cohort_status_t cohort_data_verify(const cohort_config_t* config, const char* path,
                                              cohort_data_report_fn report, void* user, int64_t* broken) {
  return guard("cohort_data_verify", [&] {
    need(path, "path");
    Config cfg = config ? config->config : Config{};
    int64_t n = data::verify_source(cfg, path, reporter(report, user));
    if (broken) *broken = n;
  });
}

}  // extern "C"
