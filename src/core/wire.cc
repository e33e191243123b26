#include "core/wire.h"

#include <algorithm>

namespace strata::core {

std::pair<char*, size_t> FrameReader::space() {
  if (headerGot_ < sizeof(h_)) return {reinterpret_cast<char*>(&h_) + headerGot_, sizeof(h_) - headerGot_};
  if (h_.length > kMaxPayload) return {nullptr, 0};
  size_t want = std::min<uint64_t>(h_.length - got_, 1 << 20);
  if (payload_.size() < got_ + want) payload_.resize(got_ + want);
  return {payload_.data() + got_, want};
}

bool FrameReader::commit(size_t n) {
  if (headerGot_ < sizeof(h_))
    headerGot_ += n;
  else
    got_ += n;
  return complete();
}

std::string FrameReader::takePayload() {
  payload_.resize(got_);
  std::string out = std::move(payload_);
  *this = FrameReader{};
  return out;
}

}  // namespace strata::core
