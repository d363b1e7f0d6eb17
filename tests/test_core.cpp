// Core: tensors and views, the tagged allocator's accounts, the meta device, and the
// autograd engine's bookkeeping (accumulation, no_grad, saved tensors released on use).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <utility>
#include <vector>

#include <cmath>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/op_list.h"

using namespace reckon;

TEST(Tensor, FactoriesAndValues) {
  Tensor t = Tensor::full({2, 3}, 1.5);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.get(5), 1.5);
  Tensor d = Tensor::from_vector({1, 2, 3}, {3}, DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.to_vector(), (std::vector<double>{1, 2, 3}));
  Tensor b = Tensor::from_vector({1.0, 0.5, -2.0}, {3}, DType::bf16);
  EXPECT_EQ(b.to_vector(), (std::vector<double>{1.0, 0.5, -2.0}));
  EXPECT_THROW(Tensor::from_vector({1, 2}, {3}), Error);
  EXPECT_THROW(t.item(), Error);
}

// An integer element holds only what its type can: found by UBSan under an ONNX model whose
// int64 constants multiply to 1e22 (a double with no int64 conversion).
TEST(Tensor, IntegerElementsRefuseValuesOutOfTheirRange) {
  Tensor i64 = Tensor::zeros({2}, DType::i64), u8 = Tensor::zeros({2}, DType::u8), i8 = Tensor::zeros({2}, DType::i8);
  i64.set(0, -9223372036854775808.0);
  EXPECT_EQ(i64.get(0), -9223372036854775808.0);
  EXPECT_THROW(i64.set(1, 9223372036854775808.0), Error);  // 2^63
  EXPECT_THROW(i64.set(1, 1e22), Error);
  EXPECT_THROW(i64.set(1, NAN), Error);
  u8.set(0, 255);
  EXPECT_EQ(u8.get(0), 255);
  EXPECT_THROW(u8.set(1, 256), Error);
  EXPECT_THROW(u8.set(1, -1), Error);
  i8.set(0, -128.5);  // truncated toward zero, as a C++ conversion does
  EXPECT_EQ(i8.get(0), -128);
  EXPECT_THROW(i8.set(1, -129), Error);
  const std::string msg = [&] {
    try {
      i64.set(1, 1e22);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_NE(msg.find("does not fit in i64"), std::string::npos) << msg;
}

TEST(Tensor, ViewsShareStorage) {
  Tensor x = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3});
  Tensor t = transpose(x, 0, 1);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.to_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  Tensor n = narrow(x, 1, 1, 2);
  EXPECT_EQ(n.to_vector(), (std::vector<double>{1, 2, 4, 5}));
  n.set(0, 42);
  EXPECT_EQ(x.get(1), 42);  // same storage
  Tensor r = reshape(x, {3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(r.storage_ptr(), x.storage_ptr());
  Tensor c = contiguous(t);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage_ptr(), x.storage_ptr());
  EXPECT_EQ(flatten(Tensor::zeros({2, 3, 4})).shape(), (Shape{2, 12}));
  EXPECT_THROW(reshape(x, {4, 2}), Error);
  // A target shape whose product wraps int64 (fuzz_onnx: an ONNX Reshape's shape is file data).
  for (const Shape& huge : {Shape{6148914691236516864, 64, -1}, Shape{6148914691236516864, 64, 3}}) {
    try {
      reshape(x, huge);
      ADD_FAILURE() << "reshape to " << shape_str(huge) << " did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[reshape]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
    }
  }
}

TEST(Allocator, TagsLiveAndPeak) {
  auto& tr = tracker(Device::cpu);
  auto before = tr.stats();
  {
    TagGuard g(Tag::param);
    Tensor p = Tensor::empty({1000});
    auto s = tr.stats();
    EXPECT_EQ(s.live_bytes[int(Tag::param)] - before.live_bytes[int(Tag::param)], 4000);
    EXPECT_EQ(p.storage().tag(), Tag::param);
  }
  EXPECT_EQ(tr.stats().live_bytes[int(Tag::param)], before.live_bytes[int(Tag::param)]);
  EXPECT_EQ(current_tag(), Tag::temporary);
}

TEST(Allocator, MetaDeviceKeepsAccountsWithoutData) {
  auto& tr = tracker(Device::meta);
  tr.reset_peak();
  auto base = tr.stats().live_total_bytes;
  {
    Tensor a = Tensor::empty({64, 3, 224, 224}, DType::f32, Device::meta);
    EXPECT_EQ(a.raw_data(), nullptr);
    EXPECT_EQ(tr.stats().live_total_bytes - base, 64LL * 3 * 224 * 224 * 4);  // 36.75 MiB
    EXPECT_THROW(a.get(0), Error);
  }
  EXPECT_EQ(tr.stats().live_total_bytes, base);
  EXPECT_EQ(tr.stats().peak_total_bytes - base, 64LL * 3 * 224 * 224 * 4);
}

// The allocator's cache of big blocks runs on the meta device too, on sizes alone, so the same
// allocations leave the same accounts on both: that is how the ledger predicts what a process
// holds (ledger/process.h). A workspace block is resident when taken; another block's pages only
// when written.
TEST(Allocator, TheMetaDeviceKeepsTheCpuCachesAccounts) {
  auto run = [](Device d) {
    host_memory_restart(d);
    const HostMemory before = host_memory(d);
    std::vector<std::shared_ptr<Storage>> keep;
    auto take = [&](int64_t bytes, Tag t) { return std::make_shared<Storage>(d, bytes, t); };
    keep.push_back(take(3 << 20, Tag::temporary));  // class 3 MiB
    keep.push_back(take(1000, Tag::temporary));     // small: malloc's
    { auto s = take(1010, Tag::temporary); }        // small, cached: the last request below takes it
    {
      auto a = take(5 << 20, Tag::workspace);  // class 5 MiB
      auto b = take(100 << 10, Tag::activation);
    }                                                          // both cached
    keep.push_back(take((5 << 20) - (200 << 10), Tag::grad));  // the cached 5 MiB block, fewer pages asked
    keep.push_back(take(70 << 10, Tag::temporary));  // class 80 KiB: the cached 112 KiB block (under 2x)
    keep.push_back(take(2 << 20, Tag::temporary));   // nothing cached: a new block
    keep.push_back(take(1000, Tag::temporary));      // the cached small one (its class is 1024 bytes)
    const HostMemory a = host_memory(d);
    keep.clear();  // every block back in the cache, counted at its own size
    EXPECT_EQ(host_memory(d).cached_bytes - before.cached_bytes,
              a.mapped_bytes - before.mapped_bytes + a.small_held_bytes - before.small_held_bytes);
    return HostMemory{.mapped_bytes = a.mapped_bytes - before.mapped_bytes,
                      .resident_bytes = a.resident_bytes - before.resident_bytes,
                      .cached_bytes = a.cached_bytes - before.cached_bytes,
                      .blocks = a.blocks - before.blocks,
                      .small_live_bytes = a.small_live_bytes - before.small_live_bytes,
                      .small_held_bytes = a.small_held_bytes - before.small_held_bytes,
                      .peak_resident_bytes = a.peak_resident_bytes - before.peak_resident_bytes};
  };
  const HostMemory c = run(Device::cpu), m = run(Device::meta);
  constexpr int64_t KiB = 1024, MiB = 1024 * KiB;
  EXPECT_EQ(c.mapped_bytes, 3 * MiB + 5 * MiB + 112 * KiB + 2 * MiB);  // 100 KiB is in the 112 KiB class
  EXPECT_EQ(c.resident_bytes, 3 * MiB + 5 * MiB + 100 * KiB + 2 * MiB);  // 70 KiB: within the 100 reached
  EXPECT_EQ(c.cached_bytes, 0);
  EXPECT_EQ(c.blocks, 4);
  EXPECT_EQ(c.small_live_bytes, 2 * 1024);  // 1000 and 1010 in 64-byte steps
  EXPECT_EQ(c.small_held_bytes, 2 * 1024);
  EXPECT_EQ(c.peak_resident_bytes, c.resident_bytes + c.small_held_bytes);
  for (auto [cv, mv] : {std::pair{c.mapped_bytes, m.mapped_bytes}, {c.resident_bytes, m.resident_bytes},
                        {c.cached_bytes, m.cached_bytes}, {c.blocks, m.blocks},
                        {c.small_live_bytes, m.small_live_bytes}, {c.small_held_bytes, m.small_held_bytes},
                        {c.peak_resident_bytes, m.peak_resident_bytes}})
    EXPECT_EQ(cv, mv);

  // What the OS says of the pages (mincore): all of a workspace block at once, none of a block
  // no one wrote.
  auto resident_pages = [](const Storage& s) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE)), n = (size_t(s.bytes()) + page - 1) / page;
    std::vector<unsigned char> v(n);
    EXPECT_EQ(mincore(s.data(), n * page, v.data()), 0);
    size_t r = 0;
    for (unsigned char x : v) r += x & 1;
    return std::pair{r, n};
  };
  host_memory_restart(Device::cpu);  // fresh blocks, not cached ones someone wrote
  Storage ws(Device::cpu, 6 << 20, Tag::workspace), tmp(Device::cpu, 6 << 20, Tag::temporary);
  auto [wr, wn] = resident_pages(ws);
  EXPECT_EQ(wr, wn);
  EXPECT_EQ(resident_pages(tmp).first, 0u);
}

TEST(Allocator, TimelineRecordsEvents) {
  auto& tr = tracker(Device::meta);
  tr.reset_peak();
  tr.set_timeline(true);
  { Tensor a = Tensor::empty({10}, DType::f32, Device::meta); }
  tr.set_timeline(false);
  auto ev = tr.timeline();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, MemEvent::alloc);
  EXPECT_EQ(ev[1].kind, MemEvent::free);
  EXPECT_EQ(ev[0].bytes, 40);
}

TEST(Autograd, AccumulatesAcrossBackwardCalls) {
  Tensor w = Tensor::from_vector({1, 2, 3}, {3});
  w.set_requires_grad(true);
  Tensor x = Tensor::from_vector({2, 2, 2}, {3});
  sum(mul(w, x)).backward();
  sum(mul(w, x)).backward();
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{4, 4, 4}));
  EXPECT_EQ(w.grad().storage().tag(), Tag::grad);
}

TEST(Autograd, SharedInputsSumGradients) {
  Tensor x = Tensor::from_vector({1, -2, 3}, {3});
  x.set_requires_grad(true);
  Tensor y = add(mul(x, x), x);  // d/dx = 2x + 1
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{3, -3, 7}));
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor w = Tensor::ones({3});
  w.set_requires_grad(true);
  Tensor y;
  {
    NoGrad ng;
    y = mul(w, w);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_THROW(sum(y).backward(), Error);
}

TEST(Autograd, SavedTensorsAreActivationsUntilUsed) {
  auto& tr = tracker(Device::cpu);
  int64_t act0 = tr.stats().live_bytes[int(Tag::activation)];
  Tensor w = Tensor::ones({1000});
  w.set_requires_grad(true);
  Tensor h = relu(mul(w, w));  // relu saves its output (4000 B); mul saves w (a leaf, param-like)
  EXPECT_EQ(tr.stats().live_bytes[int(Tag::activation)] - act0, 4000 + 4000);  // w is temporary-tagged here
  Tensor loss = sum(h);
  loss.backward();
  // After backward every node has released what it saved.
  EXPECT_EQ(tr.stats().live_bytes[int(Tag::activation)], act0);
}

TEST(Autograd, MetaDeviceRunsTheSameGraph) {
  auto& tr = tracker(Device::meta);
  Tensor x = Tensor::empty({8, 3, 16, 16}, DType::f32, Device::meta);
  Tensor w;
  {
    TagGuard g(Tag::param);
    w = Tensor::empty({4, 3, 3, 3}, DType::f32, Device::meta);
  }
  w.set_requires_grad(true);
  tr.reset_peak();
  int64_t macs = 0;
  ObserveOps obs([&](const OpRecord& r) { macs += r.cost.macs; });
  Tensor y = sum(relu(conv2d(x, w, Tensor(), {{1, 1}, {1, 1}, {1, 1}, 1})));
  y.backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_meta());
  int64_t fwd = 8LL * 4 * 16 * 16 * 3 * 9;
  EXPECT_EQ(macs, 2 * fwd);  // forward + weight gradient (x needs none)
  EXPECT_GT(tr.stats().peak_bytes[int(Tag::activation)], 0);
}

TEST(Autograd, ErrorsNameTheOp) {
  try {
    conv2d(Tensor::zeros({8, 4, 32, 32}), Tensor::zeros({16, 3, 3, 3}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[conv2d] weight has 3 input channels but x has 4 (x: [8, 4, 32, 32], weight: [16, 3, 3, 3], groups: 1)");
  }
}

TEST(Autograd, BranchWithoutGradientIsSkipped) {
  // max_pool2d's second output (indices) never gets a gradient; a graph where one branch
  // ends in a non-differentiable use must still run.
  Tensor x = Tensor::from_vector({1, 5, 2, 4}, {1, 1, 2, 2});
  x.set_requires_grad(true);
  Tensor y = max_pool2d(x, {{2, 2}, {2, 2}, {0, 0}, false, true});
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 1, 0, 0}));
}

TEST(Core, SizesThatOverflowAreErrors) {
  const int64_t big = int64_t(1) << 40;
  EXPECT_THROW(shape_numel({big, big}), Error);
  EXPECT_THROW(Tensor::empty({big, big}, DType::f32, Device::meta), Error);
  EXPECT_THROW(Tensor::empty({int64_t(1) << 62}, DType::f64, Device::meta), Error);  // bytes overflow
  EXPECT_EQ(shape_numel({big, 4}), big * 4);
  EXPECT_THROW(checked_mul(INT64_MAX, 2, "test"), Error);
}
