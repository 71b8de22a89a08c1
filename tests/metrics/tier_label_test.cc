// MetricsTierLabel: the tier label keeps what tells tiers apart and drops what could be a secret.
#include <gtest/gtest.h>

#include "kvtier/metrics.h"

namespace kvtier {
namespace {

TEST(MetricsTierLabelTest, KeepsPlainUrls) {
  EXPECT_EQ(MetricsTierLabel("mem://?capacity=4GiB"), "mem://?capacity=4GiB");
  EXPECT_EQ(MetricsTierLabel("file:///var/lib/kvtier"), "file:///var/lib/kvtier");
  EXPECT_EQ(MetricsTierLabel("fs:///pool?capacity=1TiB&ttl=1d"), "fs:///pool?capacity=1TiB&ttl=1d");
}

TEST(MetricsTierLabelTest, DropsSecretLookingParameters) {
  EXPECT_EQ(MetricsTierLabel("file:///kv?key_file=/etc/k&capacity=1GiB"), "file:///kv?capacity=1GiB");
  EXPECT_EQ(MetricsTierLabel("file:///kv?capacity=1GiB&key_file=/etc/k"), "file:///kv?capacity=1GiB");
  EXPECT_EQ(MetricsTierLabel("file:///kv?key_file=/etc/k"), "file:///kv");
  EXPECT_EQ(MetricsTierLabel("s3://b/p?Access_Key=AK&SECRET=s&session_token=t&password=p&sig=x&auth=y&cred=z"),
            "s3://b/p");
  EXPECT_EQ(MetricsTierLabel("file:///kv?%6Bey_file=/etc/k&a=1"), "file:///kv?a=1");  // %6B is 'k'
  EXPECT_EQ(MetricsTierLabel("file:///kv?&&capacity=1GiB&"), "file:///kv?capacity=1GiB");
}

TEST(MetricsTierLabelTest, DropsUserInformation) {
  EXPECT_EQ(MetricsTierLabel("s3://user:pw@host/bucket?region=x"), "s3://host/bucket?region=x");
  EXPECT_EQ(MetricsTierLabel("s3://user:p@w@host"), "s3://host");
  EXPECT_EQ(MetricsTierLabel("file:///dir/with@sign"), "file:///dir/with@sign");  // '@' in the path
}

}  // namespace
}  // namespace kvtier
