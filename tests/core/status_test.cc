#include "kvtier/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace kvtier {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_FALSE(s.retryable());
}

TEST(StatusTest, FactoriesSetCodeMessageAndRetryable) {
  EXPECT_EQ(Status::NotFound("x").code(), Code::kNotFound);
  EXPECT_TRUE(Status::NotFound("x").IsNotFound());
  EXPECT_TRUE(Status::Corruption("x").IsCorruption());
  EXPECT_TRUE(Status::NoSpace("x").IsNoSpace());
  EXPECT_TRUE(Status::NoSpace("x").retryable());
  EXPECT_TRUE(Status::Busy("x").retryable());
  EXPECT_FALSE(Status::InvalidArgument("x").retryable());
  EXPECT_TRUE(Status::IOError("x", true).retryable());
  EXPECT_EQ(Status::Internal("boom").ToString(), "Internal: boom");
  EXPECT_EQ(Status::VersionMismatch("v9").ToString(), "VersionMismatch: v9");
}

TEST(StatusTest, CodeNamesAreDistinct) {
  EXPECT_EQ(CodeName(Code::kNotSupported), "NotSupported");
  EXPECT_EQ(CodeName(Code::kBusy), "Busy");
  EXPECT_NE(CodeName(Code::kIOError), CodeName(Code::kNoSpace));
}

TEST(StatusTest, FromErrnoMapsKnownErrors) {
  EXPECT_EQ(Status::FromErrno(ENOENT, "open a").code(), Code::kNotFound);
  EXPECT_EQ(Status::FromErrno(ENOSPC, "write a").code(), Code::kNoSpace);
  EXPECT_EQ(Status::FromErrno(EINVAL, "x").code(), Code::kInvalidArgument);
  EXPECT_EQ(Status::FromErrno(EOPNOTSUPP, "x").code(), Code::kNotSupported);
  const Status again = Status::FromErrno(EAGAIN, "x");
  EXPECT_EQ(again.code(), Code::kIOError);
  EXPECT_TRUE(again.retryable());
  const Status eio = Status::FromErrno(EIO, "read /tmp/f");
  EXPECT_EQ(eio.code(), Code::kIOError);
  EXPECT_FALSE(eio.retryable());
  EXPECT_NE(eio.message().find("read /tmp/f"), std::string::npos);
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  EXPECT_TRUE(v.status().ok());
  Result<int> e = Status::NotFound("gone");
  EXPECT_FALSE(e.ok());
  EXPECT_TRUE(e.status().IsNotFound());
}

TEST(ResultTest, OkStatusBecomesInternalError) {
  Result<int> r = Status::OK();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
}

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  KVTIER_ASSIGN_OR_RETURN(int h, Half(x));
  KVTIER_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  KVTIER_RETURN_IF_ERROR(Half(x).status());
  return Status::OK();
}

TEST(ResultTest, MacrosPropagateErrors) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_EQ(Quarter(6).status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_FALSE(CheckEven(3).ok());
}

}  // namespace
}  // namespace kvtier
