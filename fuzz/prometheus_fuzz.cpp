// libFuzzer target: the Prometheus text reader and the vLLM extractor on
// arbitrary bytes. Beyond "no crash, no sanitizer report", every sample read
// must survive a write → read round trip with its name and labels intact.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/prometheus.h"
#include "telemetry/prometheus_writer.h"
#include "telemetry/vllm_snapshot.h"

using namespace lmwarden::telemetry;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)extract_vllm_snapshot(text);
  static const std::vector<std::string> kNames{"m", "m-alias"};
  const VllmSnapshot named = extract_vllm_snapshot(text, kNames);
  if (named.unmatched_models.size() > 8 || named.unmatched_models.size() == 1) std::abort();

  ExpositionReader reader(text);
  while (const ExpositionEntry* e = reader.next()) {
    if (e->kind != ExpositionEntry::Kind::kSample) continue;
    const SampleView& s = e->sample;
    std::vector<Label> labels;
    for (std::size_t i = 0; i < s.label_count; ++i)
      labels.push_back({s.labels[i].name, s.labels[i].value});
    PrometheusWriter w;
    w.sample(s.name, labels, s.value);
    const Exposition back = parse_exposition(w.text());
    if (back.samples.size() != 1 || back.samples[0].name != s.name ||
        back.samples[0].labels.size() != s.label_count) {
      std::abort();
    }
    for (std::size_t i = 0; i < s.label_count; ++i) {
      if (back.samples[0].labels[i].second != s.labels[i].value) std::abort();
    }
  }
  return 0;
}
