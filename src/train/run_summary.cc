#include "train/run_summary.h"

#include <algorithm>

#include "core/json.h"
#include "core/status.h"
#include "core/strings.h"

namespace cohort {

RunSummary::InputStages input_stages(const data::PipelineStats& p) {
  const double images = static_cast<double>(std::max<int64_t>(1, p.decoded));
  return {p.read_cpu_s / images,
          p.decode_cpu_s / images,
          p.augment_cpu_s / images,
          p.assemble_cpu_s / images,
          p.elapsed_s > 0 ? static_cast<double>(p.bytes_read) / p.elapsed_s : 0,
          p.limiting_stage};
}

std::string run_summary_json(const RunSummary& s) {
  JsonObject rates;
  rates.add_number("median", s.images_per_sec.median)
      .add_number("mean", s.images_per_sec.mean)
      .add_number("stderr", s.images_per_sec.std_error)
      .add_number("jitter", s.images_per_sec.jitter);
  JsonObject fractions;
  fractions.add_number("data_wait", s.time_fraction.data_wait)
      .add_number("comm_exposed", s.time_fraction.comm_exposed)
      .add_number("compute", s.time_fraction.compute);
  JsonObject o;
  o.add_string("schema", kRunSummarySchema)
      .add_string("model", s.model)
      .add_int("ranks", s.ranks)
      .add_int("local_ranks", s.local_ranks)
      .add_string("device", s.device)
      .add_string("precision", s.precision)
      .add_string("data", s.data)
      .add_int("batch_per_rank", s.batch_per_rank)
      .add_int("global_batch", s.global_batch)
      .add_int("steps", s.steps)
      .add_int("warmup_steps", s.warmup_steps)
      .add_object("images_per_sec", rates)
      .add_object("time_fraction", fractions)
      .add_number("epochs", s.epochs)
      .add_number("loss", s.loss)
      .add_number("top1", s.top1)
      .add_number("top5", s.top5)
      .add_number("wall_s", s.wall_s);
  if (!s.variable_update.empty()) {
    o.add_string("variable_update", s.variable_update).add_int("workers", s.workers).add_int("servers", s.servers);
    if (s.staleness) {
      JsonObject st;
      st.add_number("mean", s.staleness->mean).add_int("max", s.staleness->max);
      o.add_object("staleness", st);
    }
  }
  if (s.input) {
    const RunSummary::InputStages& in = *s.input;
    JsonObject cpu;
    cpu.add_number("read", in.read)
        .add_number("decode", in.decode)
        .add_number("augment", in.augment)
        .add_number("assemble", in.assemble)
        .add_number("total", in.read + in.decode + in.augment + in.assemble);
    JsonObject input;
    input.add_object("cpu_s_per_image", cpu)
        .add_number("read_bytes_per_s", in.read_bytes_per_s)
        .add_string("limiting_stage", in.limiting_stage);
    o.add_object("input", input);
  }
  if (s.threads) {
    const RunSummary::Threads& t = *s.threads;
    auto over_ranks = [](const RunSummary::OverRanks& v) {
      JsonObject j;
      j.add_number("median", v.median).add_number("max", v.max);
      return j;
    };
    JsonObject threads;
    threads.add_object("compute", over_ranks(t.compute))
        .add_object("engine", over_ranks(t.engine))
        .add_object("other", over_ranks(t.other));
    if (t.readers) threads.add_object("readers", over_ranks(*t.readers));
    if (t.decoders) threads.add_object("decoders", over_ranks(*t.decoders));
    JsonObject spread;
    spread.add_number("median", t.compute_spread_median).add_number("p90", t.compute_spread_p90);
    o.add_object("threads", threads).add_object("compute_spread_s", spread);
  }
  for (const auto& [key, value] : s.extra) {
    require(!value.empty(), "run summary: extra field '", key, "' has no value");
    require(!o.has(key), "run summary: extra field '", key, "' would repeat a field of the summary");
    const auto parsed =
        parse_json_members(cat(json_string(key), ": ", value), cat("run summary: extra field '", key, "'"));
    require(parsed.size() == 1, "run summary: extra field '", key, "' is not one JSON value: ", value);
    o.add_raw(key, value);
  }
  return o.str();
}

}  // namespace cohort
