// SPDX-License-Identifier: Apache-2.0
#include "joule/core/json.hpp"

#include <gtest/gtest.h>

namespace joule {
namespace {

TEST(ErrorBodyMessage, FindsTheMessageApisPutInErrorBodies) {
  EXPECT_EQ(error_body_message(R"({"error": {"message": "max_tokens must be positive", "type": "x"}})"),
            "max_tokens must be positive");  // OpenAI
  EXPECT_EQ(error_body_message(R"({"error": "zone not found"})"), "zone not found");
  EXPECT_EQ(error_body_message(R"({"message": "rate limited"})"), "rate limited");
  EXPECT_EQ(error_body_message(R"({"detail": "Not Found"})"), "Not Found");  // FastAPI
  EXPECT_EQ(error_body_message("<html>\nBad Gateway\r\n</html>"), "<html> Bad Gateway  </html>");
  EXPECT_EQ(error_body_message(std::string(500, 'x')), std::string(200, 'x'));
  EXPECT_EQ(error_body_message(""), "empty body");
  EXPECT_EQ(error_body_message(R"({"error": 3})"), R"({"error": 3})");
}

}  // namespace
}  // namespace joule
