#include <gtest/gtest.h>

#include "ui/ui_assets.h"

namespace lmwarden::ui {
namespace {

TEST(UiAssets, FindsTheIndexAsHtml) {
  const auto index = find_asset("index.html");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_NE(index->body.find("<!doctype html>"), std::string_view::npos);
  EXPECT_EQ(index->etag.front(), '"');
  EXPECT_EQ(index->etag.back(), '"');
}

TEST(UiAssets, EmbedsTheVendoredChartLibrary) {
  const auto js = find_asset("vendor/uPlot.iife.min.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(js->body.find("uPlot"), std::string_view::npos);
  const auto css = find_asset("vendor/uPlot.min.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->content_type, "text/css; charset=utf-8");
  EXPECT_NE(css->body.find(".uplot"), std::string_view::npos);
}

TEST(UiAssets, BodiesAreTheFilesBytesExactly) {
  // Every byte is escaped in the generated literal, so embedded NULs or
  // quotes would survive; the index must not end with the literal's own NUL.
  const auto index = find_asset("index.html");
  ASSERT_TRUE(index);
  ASSERT_FALSE(index->body.empty());
  EXPECT_NE(index->body.back(), '\0');
}

TEST(UiAssets, EtagsDifferBetweenFiles) {
  const auto a = find_asset("index.html");
  const auto b = find_asset("vendor/uPlot.min.css");
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->etag, b->etag);
}

TEST(UiAssets, RejectsPathsOutsideTheRoot) {
  for (const std::string_view bad :
       {"", "/index.html", "../index.html", "vendor/../index.html", "./index.html", "vendor//uPlot.min.css",
        "vendor\\uPlot.min.css", "index.html%00", "%2e%2e/index.html", "vendor/", "index.html/"}) {
    EXPECT_FALSE(find_asset(bad)) << bad;
  }
  EXPECT_FALSE(find_asset(std::string_view("index.html\0x", 12)));
  EXPECT_FALSE(find_asset("no-such-file.js"));
}

TEST(UiAssets, MapsPageRoutesToTheIndex) {
  const auto index = find_asset("index.html");
  ASSERT_TRUE(index);
  for (const std::string_view page : {"/", "/models", "/models/qwen3-4b", "/models/Qwen/Qwen3-4B", "/stats"}) {
    const auto a = asset_for_request_path(page);
    ASSERT_TRUE(a) << page;
    EXPECT_EQ(a->body.data(), index->body.data()) << page;
  }
  const auto css = asset_for_request_path("/ui/vendor/uPlot.min.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->content_type, "text/css; charset=utf-8");
}

TEST(UiAssets, LeavesOtherRoutesToTheCaller) {
  for (const std::string_view other :
       {"/api/models", "/v1/models", "/health", "/metrics", "/ui/", "/ui/../api", "/statsx", ""}) {
    EXPECT_FALSE(asset_for_request_path(other)) << other;
  }
}

TEST(UiAssets, MatchesIfNoneMatch) {
  const std::string_view etag = "\"abc\"";
  EXPECT_TRUE(etag_matches("\"abc\"", etag));
  EXPECT_TRUE(etag_matches("W/\"abc\"", etag));
  EXPECT_TRUE(etag_matches("\"x\", \"abc\"", etag));
  EXPECT_TRUE(etag_matches("*", etag));
  EXPECT_FALSE(etag_matches("", etag));
  EXPECT_FALSE(etag_matches("\"abd\"", etag));
  EXPECT_FALSE(etag_matches("abc", etag));
}

}  // namespace
}  // namespace lmwarden::ui
