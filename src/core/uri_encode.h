// Percent-encoding of URL parts (RFC 3986): every byte but the unreserved ones (letters, digits,
// "-._~") becomes %XX, upper-case hex; with `keep_slash`, '/' is kept too (a path). Used where kvtier
// builds a URL or a request path from names it does not control: a tier URL's key_file=, an S3 key.
#pragma once

#include <string>
#include <string_view>

namespace kvtier::internal {

std::string UriEncode(std::string_view s, bool keep_slash);

}  // namespace kvtier::internal
