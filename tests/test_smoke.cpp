#include <gtest/gtest.h>

#include "reckon/ops/functional.h"
#include "reckon/ops/op_list.h"

using namespace reckon;

TEST(Smoke, AddBroadcast) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({10, 20, 30}, {3});
  Tensor c = add(a, b);
  EXPECT_EQ(c.shape(), (Shape{2, 3}));
  EXPECT_EQ(c.to_vector(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
}
