#pragma once
#include "reckon/ops/op.h"
#define RK_NORM_OPS(X)
