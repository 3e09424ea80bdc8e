#include <gtest/gtest.h>

#include "telemetry/served_models.h"

namespace lmwarden::telemetry {
namespace {

// vLLM's GET /v1/models: each --served-model-name, and each LoRA adapter.
TEST(ServedModels, ReadsTheIdsOfAnOpenAiList) {
  const auto ids = served_model_ids(
      R"({"object":"list","data":[{"id":"Qwen/Qwen3-8B","object":"model","created":1764950000,)"
      R"("owned_by":"vllm","root":"/models/qwen3","parent":null,"max_model_len":40960},)"
      R"({"id":"qwen","object":"model","root":"/models/qwen3","parent":null},)"
      R"({"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"Qwen/Qwen3-8B"}]})");
  ASSERT_TRUE(ids);
  EXPECT_EQ(*ids, (std::vector<std::string>{"Qwen/Qwen3-8B", "qwen", "sql-lora"}));
  EXPECT_EQ(served_model_ids(R"({"object":"list","data":[]})"), std::vector<std::string>{});
  // An entry without a string id is skipped, not the list.
  EXPECT_EQ(served_model_ids(R"({"data":[{"id":7},{"name":"x"},{"id":"m"}]})"),
            std::vector<std::string>{"m"});
}

TEST(ServedModels, AnythingElseIsNoList) {
  for (const char* body : {"", "not json", "<html>404</html>", "[]", R"({"data":{}})",
                           R"({"object":"list"})", R"({"data":[{"id":"m"}])"})
    EXPECT_FALSE(served_model_ids(body)) << body;
}

TEST(ServedModels, AtMost256AreKept) {
  std::string body = R"({"data":[)";
  for (int i = 0; i < 300; ++i)
    body += (i ? "," : "") + std::string(R"({"id":"a)") + std::to_string(i) + "\"}";
  body += "]}";
  const auto ids = served_model_ids(body);
  ASSERT_TRUE(ids);
  EXPECT_EQ(ids->size(), 256u);
  EXPECT_EQ(ids->back(), "a255");
}

}  // namespace
}  // namespace lmwarden::telemetry
