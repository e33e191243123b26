// The data types as the device layer names them (src/common/dtype.h holds them).
#pragma once

#include "common/dtype.h"

namespace strata::device {

using strata::Bf16;
using strata::dtypeName;
using strata::dtypeSize;
using strata::Format;
using strata::Fp8E4M3;
using strata::Fp8E5M2;
using strata::HostTypes;
using strata::switchType;
using strata::withType;

}  // namespace strata::device
