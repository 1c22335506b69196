// Runtime: hooks (observers see every value with the right contents, overrides reach
// every consumer), buffer reuse (it happens, and never corrupts results: random
// graphs compared with a reference interpreter and with runs that keep every value
// alive), the free batch dimension, and clear errors for bad inputs and failing
// kernels. Test-only ops live in the domain "test" of a private registry.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>

#include "onnxio/model_io.h"
#include "ops/registry.h"
#include "runtime/session.h"

namespace seqto::runtime {
namespace {

using ops::Kernel;
using ops::KernelContext;
using ops::KernelInit;
using ops::MakeKernel;
using ops::OpRegistry;

int g_counted_runs = 0;

// Test ops: simple float32 kernels with obvious reference semantics.
void RegisterTestOps(OpRegistry& r) {
  // y = alpha * x + beta
  r.Register({"Affine", "test", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                SEQTO_ASSIGN_OR_RETURN(float alpha, init.node.attr_float("alpha", 1.f));
                SEQTO_ASSIGN_OR_RETURN(float beta, init.node.attr_float("beta", 0.f));
                return MakeKernel([alpha, beta](KernelContext& ctx) -> Status {
                  const Tensor& x = ctx.input(0);
                  Tensor& y = ctx.Allocate(0, DType::kFloat32, x.shape());
                  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = alpha * x.data<float>()[i] + beta;
                  return Status::Ok();
                });
              }});
  // y = a + b (same shapes, or b with first dimension 1, repeated)
  r.Register({"Add", "test", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  const Tensor& a = ctx.input(0);
                  const Tensor& b = ctx.input(1);
                  Shape rest_a(a.shape().begin() + 1, a.shape().end()), rest_b(b.shape().begin() + 1, b.shape().end());
                  if (a.shape() != b.shape() && (b.dim(0) != 1 || rest_a != rest_b)) return UserError("shapes differ");
                  Tensor& y = ctx.Allocate(0, DType::kFloat32, a.shape());
                  for (int64_t i = 0; i < a.numel(); ++i)
                    y.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i % b.numel()];
                  return Status::Ok();
                });
              }});
  // y[n, m] = sum_k x[n, k] * w[k, m]
  r.Register({"Dense", "test", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  const Tensor& x = ctx.input(0);
                  const Tensor& w = ctx.input(1);
                  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(1);
                  if (w.dim(0) != k) return UserError("inner sizes differ");
                  Tensor& y = ctx.Allocate(0, DType::kFloat32, {n, m});
                  for (int64_t i = 0; i < n; ++i)
                    for (int64_t j = 0; j < m; ++j) {
                      float s = 0;
                      for (int64_t l = 0; l < k; ++l) s += x.data<float>()[i * k + l] * w.data<float>()[l * m + j];
                      y.data<float>()[i * m + j] = s;
                    }
                  return Status::Ok();
                });
              }});
  r.Register({"Counted", "test", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  ++g_counted_runs;
                  ctx.SetOutput(0, ctx.input(0));
                  return Status::Ok();
                });
              }});
  r.Register({"NegativeShape", "test", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  ctx.Allocate(0, DType::kFloat32, {-1, 3});
                  return Status::Ok();
                });
              }});
  r.Register({"Huge", "test", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  ctx.Allocate(0, DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40});
                  return Status::Ok();
                });
              }});
  r.Register({"WrongOutput", "test", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  ctx.Allocate(3, DType::kFloat32, {1});
                  return Status::Ok();
                });
              }});
  r.Register({"Throws", "test", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext&) -> Status { throw std::runtime_error("boom"); });
              }});
  r.Register({"NoOutput", "test", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext&) -> Status { return Status::Ok(); });
              }});
}

const OpRegistry& TestRegistry() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    ops::RegisterAllOps(*r);
    RegisterTestOps(*r);
    return r;
  }();
  return *registry;
}

SessionOptions TestOptions() {
  SessionOptions o;
  o.registry = &TestRegistry();
  o.threads = 1;
  return o;
}

ir::ValueInfo Info(const std::string& name, std::vector<int64_t> dims, DType dtype = DType::kFloat32) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.shape.emplace();
  for (int64_t d : dims) v.shape->push_back(d >= 0 ? ir::Dim{d, ""} : ir::Dim{-1, "N"});
  return v;
}

ir::Node Node(const std::string& name, const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
              std::string domain = "test") {
  ir::Node n;
  n.name = name;
  n.op_type = op;
  n.domain = std::move(domain);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

ir::Node AffineNode(const std::string& name, const std::string& in, const std::string& out, float alpha, float beta) {
  ir::Node n = Node(name, "Affine", {in}, {out});
  ir::Attribute a;
  a.type = ir::Attribute::Type::kFloat;
  a.f = alpha;
  n.attributes["alpha"] = a;
  a.f = beta;
  n.attributes["beta"] = a;
  return n;
}

ir::Model NewModel() {
  ir::Model m;
  m.opsets = {{"", 13}, {"test", 1}};
  return m;
}

Tensor Iota(Shape shape, float start = 0.f, float step = 1.f) {
  Tensor t(DType::kFloat32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + step * static_cast<float>(i);
  return t;
}

std::vector<float> Floats(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

std::unique_ptr<Session> MustCreate(const ir::Model& m, const SessionOptions& o = TestOptions()) {
  auto s = Session::Create(m, o);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? std::move(*s) : nullptr;
}

// --- hooks -------------------------------------------------------------------------

// x -> a = 2x+1 -> b = relu(a) -> c = -b+3 -> y = c + w'   where w' = 0.5 w (folded)
ir::Model HookModel() {
  ir::Model m = NewModel();
  m.graph.inputs = {Info("x", {-1, 3})};
  m.graph.outputs = {Info("y", {-1, 3})};
  m.graph.initializers["w"] = Tensor::FromVector<float>({1, 3}, {2, 4, 6});
  m.graph.nodes = {AffineNode("scale_w", "w", "w_half", 0.5f, 0.f), AffineNode("n1", "x", "a", 2.f, 1.f),
                   Node("n2", "Relu", {"a"}, {"b"}, ""), AffineNode("n3", "b", "c", -1.f, 3.f),
                   Node("n4", "Add", {"c", "w_half"}, {"y"})};
  return m;
}

TEST(RuntimeHooks, ObserversSeeEveryValueWithItsContents) {
  auto s = MustCreate(HookModel());
  ASSERT_TRUE(s);
  const Tensor x = Tensor::FromVector<float>({1, 3}, {-2, 0, 1});
  std::vector<std::string> order;
  std::map<std::string, std::vector<float>> seen;
  RunHooks hooks;
  hooks.observe = [&](const std::string& name, const Tensor& v) {
    order.push_back(name);
    seen[name] = Floats(v);  // copies: the tensor is only valid during the call
  };
  auto out = s->Run({{"x", x}}, &hooks);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(order, (std::vector<std::string>{"x", "w_half", "a", "b", "c", "y"}));
  EXPECT_EQ(seen["x"], (std::vector<float>{-2, 0, 1}));
  EXPECT_EQ(seen["w_half"], (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(seen["a"], (std::vector<float>{-3, 1, 3}));
  EXPECT_EQ(seen["b"], (std::vector<float>{0, 1, 3}));
  EXPECT_EQ(seen["c"], (std::vector<float>{3, 2, 0}));
  EXPECT_EQ(seen["y"], (std::vector<float>{4, 4, 3}));
  EXPECT_EQ(Floats(out->at("y")), seen["y"]);
  // A second run with other data: the observers see the new contents (no stale buffers).
  seen.clear();
  out = s->Run({{"x", Tensor::FromVector<float>({2, 3}, {1, 1, 1, -1, -1, -1})}}, &hooks);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(seen["a"], (std::vector<float>{3, 3, 3, -1, -1, -1}));
  EXPECT_EQ(seen["y"], (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(RuntimeHooks, OverridesReachEveryConsumer) {
  auto s = MustCreate(HookModel());
  ASSERT_TRUE(s);
  std::map<std::string, std::vector<float>> seen;
  RunHooks hooks;
  hooks.override_value = [](const std::string& name, const Tensor& v) -> std::optional<Tensor> {
    if (name == "b") return Tensor::FromVector<float>(v.shape(), std::vector<float>(v.numel(), 7.f));
    if (name == "x") return Tensor::FromVector<float>(v.shape(), std::vector<float>(v.numel(), 10.f));
    return std::nullopt;
  };
  hooks.observe = [&](const std::string& name, const Tensor& v) { seen[name] = Floats(v); };
  auto out = s->Run({{"x", Iota({2, 3})}}, &hooks);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(seen["x"], std::vector<float>(6, 10.f));  // observers see the replacement
  EXPECT_EQ(seen["a"], std::vector<float>(6, 21.f));  // computed from the replaced input
  EXPECT_EQ(seen["b"], std::vector<float>(6, 7.f));
  EXPECT_EQ(seen["c"], std::vector<float>(6, -4.f));  // downstream of the override
  EXPECT_EQ(Floats(out->at("y")), (std::vector<float>{-3, -2, -1, -3, -2, -1}));
  // Without hooks the same session gives the plain result again.
  out = s->Run({{"x", Tensor::FromVector<float>({1, 3}, {-2, 0, 1})}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Floats(out->at("y")), (std::vector<float>{4, 4, 3}));
}

TEST(RuntimeHooks, OverridingAFoldedValueNeedsKeepValues) {
  RunHooks hooks;
  hooks.override_value = [](const std::string& name, const Tensor& v) -> std::optional<Tensor> {
    if (name == "w_half") return Tensor::FromVector<float>(v.shape(), {100, 200, 300});
    return std::nullopt;
  };
  const Tensor x = Tensor::FromVector<float>({1, 3}, {-2, 0, 1});
  {
    auto s = MustCreate(HookModel());  // w_half is folded at creation
    auto out = s->Run({{"x", x}}, &hooks);
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.error().message.find("'w_half'"), std::string::npos) << out.error().message;
    EXPECT_NE(out.error().message.find("keep_values"), std::string::npos) << out.error().message;
  }
  SessionOptions o = TestOptions();
  o.keep_values = {"w_half"};
  auto s = MustCreate(HookModel(), o);
  auto out = s->Run({{"x", x}}, &hooks);
  ASSERT_TRUE(out.ok()) << out.error().message;
  EXPECT_EQ(Floats(out->at("y")), (std::vector<float>{103, 202, 300}));
}

TEST(RuntimeHooks, ConstantFoldingRunsOnceAtCreation) {
  ir::Model m = NewModel();
  m.graph.inputs = {Info("x", {-1, 2})};
  m.graph.outputs = {Info("y", {-1, 2})};
  m.graph.initializers["w"] = Tensor::FromVector<float>({1, 2}, {1, 2});
  m.graph.nodes = {Node("count", "Counted", {"w"}, {"wc"}), AffineNode("scale", "wc", "ws", 3.f, 0.f),
                   Node("add", "Add", {"x", "ws"}, {"y"})};
  m.graph.nodes[2].inputs = {"x", "ws"};
  m.graph.inputs = {Info("x", {1, 2})};
  g_counted_runs = 0;
  auto s = MustCreate(m);
  EXPECT_EQ(g_counted_runs, 1);
  for (int i = 0; i < 3; ++i) {
    auto out = s->Run({{"x", Tensor::FromVector<float>({1, 2}, {1, 1})}});
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(Floats(out->at("y")), (std::vector<float>{4, 7}));
  }
  EXPECT_EQ(g_counted_runs, 1);
  SessionOptions no_fold = TestOptions();
  no_fold.fold_constants = false;
  g_counted_runs = 0;
  auto unfolded = MustCreate(m, no_fold);
  auto out = unfolded->Run({{"x", Tensor::FromVector<float>({1, 2}, {1, 1})}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(Floats(out->at("y")), (std::vector<float>{4, 7}));
  EXPECT_EQ(g_counted_runs, 1);
}

// --- buffer reuse ------------------------------------------------------------------

// A chain of `n` Affine nodes (each 1.01 x + 0.5).
ir::Model ChainModel(int n, Shape shape) {
  ir::Model m = NewModel();
  std::vector<int64_t> dims(shape.begin(), shape.end());
  dims[0] = -1;
  m.graph.inputs = {Info("x", dims)};
  m.graph.outputs = {Info("v" + std::to_string(n), dims)};
  for (int i = 1; i <= n; ++i)
    m.graph.nodes.push_back(AffineNode("n" + std::to_string(i), i == 1 ? "x" : "v" + std::to_string(i - 1),
                                       "v" + std::to_string(i), 1.01f, 0.5f));
  return m;
}

TEST(RuntimeBuffers, ALongChainReusesAFewBuffers) {
  const int kNodes = 40;
  auto s = MustCreate(ChainModel(kNodes, {64, 64}));
  ASSERT_TRUE(s);
  const Tensor x = Iota({64, 64}, -1.f, 1e-3f);
  // Distinct storages among node outputs, and whether any was freed and replaced
  // (a weak_ptr that expired would mean "new allocation at the same address").
  std::set<const Storage*> storages;
  std::vector<std::weak_ptr<Storage>> weak;
  RunHooks count;
  count.observe = [&](const std::string& name, const Tensor& v) {
    if (name == "x") return;
    storages.insert(v.storage().get());
    weak.push_back(v.storage());
  };
  for (int run = 0; run < 3; ++run) {
    auto out = s->Run({{"x", x}}, &count);
    ASSERT_TRUE(out.ok()) << out.error().message;
  }
  // Two buffers alternate along the chain (plus the output, which the caller keeps).
  EXPECT_LE(storages.size(), 6u) << "buffers are not reused";
  int alive_at_end = 0;
  for (auto& w : weak) alive_at_end += !w.expired();
  EXPECT_GT(alive_at_end, kNodes) << "buffers were freed instead of recycled";

  // Keeping every value alive defeats reuse: one storage per value.
  std::vector<Tensor> kept;
  std::set<const Storage*> kept_storages;
  RunHooks keep;
  keep.observe = [&](const std::string& name, const Tensor& v) {
    kept.push_back(v);
    kept_storages.insert(v.storage().get());
  };
  auto kept_out = s->Run({{"x", x}}, &keep);
  ASSERT_TRUE(kept_out.ok());
  EXPECT_EQ(kept_storages.size(), static_cast<size_t>(kNodes + 1));
  // ...and the observed values are exactly the chain's values.
  std::vector<float> expect = Floats(x);
  for (int i = 1; i <= kNodes; ++i) {
    for (float& e : expect) e = 1.01f * e + 0.5f;
    ASSERT_EQ(Floats(kept[i]), expect) << "value v" << i;
  }
  auto plain = s->Run({{"x", x}});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(Floats(plain->at("v40")), expect);
}

// Random graphs of elementwise ops (with aliasing Identity nodes, fan-out, constants
// that fold, several outputs): results with the buffer pool equal those of a
// reference interpreter and of runs with folding off and every value kept alive.
TEST(RuntimeBuffers, ReuseNeverCorruptsRandomGraphs) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const int64_t width = 1 + rng() % 40;
    ir::Model m = NewModel();
    m.graph.inputs = {Info("x", {-1, width})};
    std::vector<std::string> values = {"x"};
    std::set<std::string> constant;
    const int n_consts = rng() % 3;
    for (int c = 0; c < n_consts; ++c) {
      const std::string name = "const" + std::to_string(c);
      std::vector<float> data(width);
      for (auto& d : data) d = static_cast<float>(rng() % 100) / 50.f - 1.f;
      m.graph.initializers[name] = Tensor::FromVector<float>({1, width}, data);
      values.push_back(name);
      constant.insert(name);
    }
    const int n_nodes = 3 + rng() % 30;
    for (int i = 0; i < n_nodes; ++i) {
      const std::string out = "t" + std::to_string(i);
      const std::string name = "node" + std::to_string(i);
      // Prefer recent values (long chains), sometimes far ones (long lifetimes).
      auto pick = [&] {
        const size_t n = values.size();
        return values[rng() % 3 == 0 ? rng() % n : n - 1 - rng() % std::min<size_t>(n, 3)];
      };
      const std::string a = pick(), b = pick();
      const int kind = rng() % 4;
      ir::Node node;
      // Add needs same shapes: constants are [1, width], the rest [N, width].
      if (kind == 0 && constant.count(a) == constant.count(b))
        node = Node(name, "Add", {a, b}, {out});
      else if (kind == 1)
        node = Node(name, "Relu", {a}, {out}, "");
      else if (kind == 2)
        node = Node(name, "Identity", {a}, {out}, "");
      else
        node =
            AffineNode(name, a, out, static_cast<float>(rng() % 7) / 4.f - 0.75f, static_cast<float>(rng() % 5) - 2.f);
      const bool is_const =
          std::all_of(node.inputs.begin(), node.inputs.end(), [&](auto& v) { return constant.count(v); });
      if (is_const) constant.insert(out);
      m.graph.nodes.push_back(node);
      values.push_back(out);
    }
    // Outputs: the last value and a few random non-constant ones.
    std::set<std::string> outs = {values.back()};
    for (int k = 0; k < 3; ++k) outs.insert(values[rng() % values.size()]);
    for (const auto& o : outs)
      if (o != "x" && !m.graph.initializers.count(o))
        m.graph.outputs.push_back(Info(o, {constant.count(o) ? 1 : -1, width}));
    if (m.graph.outputs.empty()) continue;

    // Reference interpreter.
    auto reference = [&](const Tensor& x) {
      std::map<std::string, std::vector<float>> v;
      v["x"] = Floats(x);
      for (const auto& [name, t] : m.graph.initializers) v[name] = Floats(t);
      for (const ir::Node& n : m.graph.nodes) {
        const auto& a = v[n.inputs[0]];
        std::vector<float> r(a.size());
        if (n.op_type == "Add") {
          const auto& b = v[n.inputs[1]];
          for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] + b[i];
        } else if (n.op_type == "Relu") {
          for (size_t i = 0; i < a.size(); ++i) r[i] = a[i] > 0 ? a[i] : 0;
        } else if (n.op_type == "Identity") {
          r = a;
        } else {
          const float alpha = n.attributes.at("alpha").f, beta = n.attributes.at("beta").f;
          for (size_t i = 0; i < a.size(); ++i) r[i] = alpha * a[i] + beta;
        }
        v[n.outputs[0]] = r;
      }
      return v;
    };

    auto pooled = MustCreate(m);
    SessionOptions plain_options = TestOptions();
    plain_options.fold_constants = false;
    auto plain = MustCreate(m, plain_options);
    ASSERT_TRUE(pooled && plain);
    for (int run = 0; run < 4; ++run) {
      const int64_t batch = 1 + rng() % 4;
      const Tensor x = Iota({batch, width}, static_cast<float>(run) - 3.f, 0.37f);
      const auto expect = reference(x);
      std::map<std::string, std::vector<float>> observed;
      RunHooks observe;
      observe.observe = [&](const std::string& name, const Tensor& v) { observed[name] = Floats(v); };
      auto got = pooled->Run({{"x", x}}, &observe);
      ASSERT_TRUE(got.ok()) << got.error().message;
      std::vector<Tensor> kept;
      RunHooks keep_all;
      keep_all.observe = [&](const std::string&, const Tensor& v) { kept.push_back(v); };
      auto base = plain->Run({{"x", x}}, &keep_all);
      ASSERT_TRUE(base.ok()) << base.error().message;
      for (const auto& o : m.graph.outputs) {
        ASSERT_EQ(Floats(got->at(o.name)), expect.at(o.name)) << "output " << o.name;
        ASSERT_EQ(Floats(base->at(o.name)), expect.at(o.name)) << "output " << o.name << " (no reuse)";
      }
      for (const auto& [name, data] : observed) ASSERT_EQ(data, expect.at(name)) << "observed " << name;
      ASSERT_EQ(observed.size() + m.graph.initializers.size(), expect.size());
    }
  }
}

// --- batch -------------------------------------------------------------------------

// Runs `m` on a batch of 5 and on each sample alone; the results must agree.
void ExpectPerSampleEquality(const ir::Model& m, const Shape& sample_shape, const SessionOptions& options,
                             float tolerance) {
  auto s = MustCreate(m, options);
  ASSERT_TRUE(s);
  Shape batch_shape = sample_shape;
  batch_shape.insert(batch_shape.begin(), 5);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  Tensor batch(DType::kFloat32, batch_shape);
  for (int64_t i = 0; i < batch.numel(); ++i) batch.data<float>()[i] = dist(rng);
  const std::string in = m.graph.inputs[0].name;
  auto all = s->Run({{in, batch}});
  ASSERT_TRUE(all.ok()) << all.error().message;
  const int64_t per_in = NumElements(sample_shape);
  for (int64_t n = 0; n < 5; ++n) {
    Shape one_shape = sample_shape;
    one_shape.insert(one_shape.begin(), 1);
    Tensor one(DType::kFloat32, one_shape);
    std::copy(batch.data<float>() + n * per_in, batch.data<float>() + (n + 1) * per_in, one.data<float>());
    auto single = s->Run({{in, one}});
    ASSERT_TRUE(single.ok()) << single.error().message;
    for (const auto& [name, t] : *single) {
      const Tensor& full = all->at(name);
      ASSERT_EQ(full.dim(0), 5) << name;
      ASSERT_EQ(t.dim(0), 1) << name;
      const int64_t per_out = t.numel();
      for (int64_t i = 0; i < per_out; ++i)
        ASSERT_NEAR(t.data<float>()[i], full.data<float>()[n * per_out + i], tolerance)
            << name << " sample " << n << " element " << i;
    }
  }
}

TEST(RuntimeBatch, FreeBatchDimensionMatchesPerSample) {
  ir::Model m = NewModel();
  m.graph.inputs = {Info("x", {1, 8})};  // declared batch 1: still free
  m.graph.outputs = {Info("y", {1, 4})};
  std::vector<float> w(32);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<float>(i));
  m.graph.initializers["w"] = Tensor::FromVector<float>({8, 4}, w);
  m.graph.nodes = {Node("dense", "Dense", {"x", "w"}, {"h"}), Node("relu", "Relu", {"h"}, {"r"}, ""),
                   AffineNode("affine", "r", "y", 0.5f, -0.25f)};
  ExpectPerSampleEquality(m, {8}, TestOptions(), 0.f);
}

TEST(RuntimeBatch, FreeBatchDimensionWithBuiltInOps) {
  const auto& global = OpRegistry::Global();
  for (const char* op : {"MatMul", "Add", "Relu", "Conv", "Softmax"})
    if (!global.Has("", op)) GTEST_SKIP() << op << " is not registered yet";
  {
    ir::Model m = NewModel();
    m.graph.inputs = {Info("x", {-1, 6})};
    m.graph.outputs = {Info("y", {-1, 3})};
    m.graph.initializers["w"] = Iota({6, 3}, -1.f, 0.1f);
    m.graph.initializers["b"] = Tensor::FromVector<float>({3}, {0.5f, -0.5f, 0.f});
    m.graph.nodes = {Node("mm", "MatMul", {"x", "w"}, {"h"}, ""), Node("add", "Add", {"h", "b"}, {"hb"}, ""),
                     Node("relu", "Relu", {"hb"}, {"r"}, ""), Node("sm", "Softmax", {"r"}, {"y"}, "")};
    SCOPED_TRACE("MatMul model");
    ExpectPerSampleEquality(m, {6}, TestOptions(), 1e-5f);
  }
  {
    ir::Model m = NewModel();
    m.graph.inputs = {Info("x", {-1, 3, 6, 6})};
    m.graph.outputs = {Info("y", {-1, 4, 4, 4})};
    m.graph.initializers["w"] = Iota({4, 3, 3, 3}, -0.5f, 0.01f);
    m.graph.initializers["b"] = Tensor::FromVector<float>({4}, {0.1f, 0.2f, -0.3f, 0.f});
    m.graph.nodes = {Node("conv", "Conv", {"x", "w", "b"}, {"c"}, ""), Node("relu", "Relu", {"c"}, {"y"}, "")};
    SCOPED_TRACE("Conv model");
    ExpectPerSampleEquality(m, {3, 6, 6}, TestOptions(), 1e-5f);
  }
}

// --- errors ------------------------------------------------------------------------

ir::Model ReluModel() {
  ir::Model m = NewModel();
  m.graph.inputs = {Info("x", {-1, 3, 4})};
  m.graph.outputs = {Info("y", {-1, 3, 4})};
  m.graph.nodes = {Node("relu", "Relu", {"x"}, {"y"}, "")};
  return m;
}

void ExpectRunError(Session& s, const TensorMap& inputs, const std::vector<std::string>& parts) {
  auto out = s.Run(inputs);
  ASSERT_FALSE(out.ok());
  const std::string& msg = out.error().message;
  EXPECT_EQ(out.error().kind, ErrorKind::kUser) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(RuntimeErrors, WrongInputsNameTheInputAndBothShapes) {
  auto s = MustCreate(ReluModel());
  ASSERT_TRUE(s);
  ExpectRunError(*s, {{"x", Tensor(DType::kInt32, {2, 3, 4})}},
                 {"input 'x'", "element type", "float32[Nx3x4]", "int32[2x3x4]"});
  ExpectRunError(*s, {{"x", Tensor(DType::kFloat32, {2, 3, 5})}},
                 {"input 'x'", "dimension 2", "float32[Nx3x4]", "float32[2x3x5]"});
  ExpectRunError(*s, {{"x", Tensor(DType::kFloat32, {2, 12})}},
                 {"input 'x'", "rank", "float32[Nx3x4]", "float32[2x12]"});
  ExpectRunError(*s, {{"x", Tensor(DType::kFloat32, {})}}, {"input 'x'", "rank", "float32[scalar]"});
  ExpectRunError(*s, {{"x", Tensor()}}, {"input 'x'", "empty tensor"});
  ExpectRunError(*s, {}, {"input 'x'", "not given"});
  ExpectRunError(*s, {{"x", Tensor(DType::kFloat32, {2, 3, 4})}, {"z", Tensor(DType::kFloat32, {1})}},
                 {"'z' is not an input", "'x'"});
  // The batch dimension is free, including 0 and large.
  for (int64_t batch : {0, 1, 7}) {
    auto out = s->Run({{"x", Tensor(DType::kFloat32, {batch, 3, 4})}});
    ASSERT_TRUE(out.ok()) << out.error().message;
    EXPECT_EQ(out->at("y").shape(), (Shape{batch, 3, 4}));
  }
}

TEST(RuntimeErrors, UnsupportedOpNamesNodeOpAndOpset) {
  ir::Model m = ReluModel();
  m.graph.nodes[0] = Node("frob", "Frobnicate", {"x"}, {"y"}, "");
  auto s = Session::Create(m, TestOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kUser);
  EXPECT_NE(s.error().message.find("node 'frob' (Frobnicate), opset 13"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("unsupported op ai.onnx.Frobnicate"), std::string::npos) << s.error().message;
  m.graph.nodes[0] = Node("odd", "Odd", {"x"}, {"y"}, "com.example");
  s = Session::Create(m, TestOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("unsupported op com.example.Odd"), std::string::npos) << s.error().message;
}

TEST(RuntimeErrors, FailingKernelsBecomeErrorsNamingTheNode) {
  struct Case {
    std::string op;
    ErrorKind kind;
    std::string expect;
  };
  const Case cases[] = {
      {"NegativeShape", ErrorKind::kUser, "negative shape -1x3"},     {"Huge", ErrorKind::kUser, "size limit"},
      {"WrongOutput", ErrorKind::kUser, "allocated output 3"},        {"Throws", ErrorKind::kInternal, "boom"},
      {"NoOutput", ErrorKind::kInternal, "did not produce output 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    ir::Model m = ReluModel();
    m.graph.nodes = {Node("bad", c.op, {"x"}, {"y"})};
    auto s = MustCreate(m);
    ASSERT_TRUE(s);
    auto out = s->Run({{"x", Tensor(DType::kFloat32, {1, 3, 4})}});
    ASSERT_FALSE(out.ok());
    EXPECT_EQ(out.error().kind, c.kind) << out.error().message;
    EXPECT_NE(out.error().message.find("node 'bad' (" + c.op + "), opset 1"), std::string::npos) << out.error().message;
    EXPECT_NE(out.error().message.find(c.expect), std::string::npos) << out.error().message;
    // The session stays usable for the next run's error.
    EXPECT_FALSE(s->Run({{"x", Tensor(DType::kFloat32, {1, 3, 4})}}).ok());
    // The same failure during constant folding fails Create, naming the node.
    ir::Model folded = ReluModel();
    folded.graph.initializers["c"] = Tensor(DType::kFloat32, {1});
    folded.graph.nodes = {Node("bad_const", c.op, {"c"}, {"k"}), Node("relu", "Relu", {"x"}, {"y"}, "")};
    auto created = Session::Create(folded, TestOptions());
    ASSERT_FALSE(created.ok());
    EXPECT_NE(created.error().message.find("node 'bad_const' (" + c.op + ")"), std::string::npos)
        << created.error().message;
  }
}

TEST(RuntimeErrors, BadGraphsAreRefusedAtCreation) {
  ir::Model m = ReluModel();
  m.graph.nodes[0].inputs = {"nowhere"};
  auto s = Session::Create(m, TestOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("'nowhere'"), std::string::npos) << s.error().message;
  m = ReluModel();
  m.graph.outputs.push_back(Info("missing", {1}));
  s = Session::Create(m, TestOptions());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("'missing' is never produced"), std::string::npos) << s.error().message;
}

TEST(Runtime, ModelsBuiltInCodeMayLeaveNodesUnnamed) {
  ir::Model m = ChainModel(3, {2, 2});
  for (auto& n : m.graph.nodes) n.name.clear();
  for (bool optimize : {false, true}) {
    SessionOptions o = TestOptions();
    o.optimize = optimize;
    auto s = MustCreate(m, o);
    ASSERT_TRUE(s);
    auto out = s->Run({{"x", Iota({2, 2})}});
    ASSERT_TRUE(out.ok()) << out.error().message;
  }
}

TEST(Runtime, OutputsSurviveLaterRuns) {
  // Results handed to the caller are never recycled into a later run.
  auto s = MustCreate(ChainModel(5, {4, 4}));
  auto first = s->Run({{"x", Iota({4, 4})}});
  ASSERT_TRUE(first.ok());
  const std::vector<float> kept = Floats(first->at("v5"));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(s->Run({{"x", Iota({4, 4}, 100.f)}}).ok());
  EXPECT_EQ(Floats(first->at("v5")), kept);
}

// Inputs the fuzzer (tests/fuzz) found crashing, hanging or leaking: each must now
// load or fail cleanly, and so must creating a session for it, exactly as in
// tests/fuzz/fuzz_model_loader.cc.
TEST(Runtime, FuzzRegressionsLoadOrFailCleanly) {
  const std::filesystem::path dir = std::filesystem::path(SEQTO_SOURCE_DIR) / "tests/fuzz/regressions";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no regressions recorded";
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    SCOPED_TRACE(entry.path().string());
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ++files;
    auto model = onnxio::LoadModelFromBytes(bytes, "", "fuzz.onnx");
    if (!model.ok()) {
      EXPECT_FALSE(model.error().message.empty());
      continue;
    }
    SessionOptions options;
    options.threads = 1;
    options.max_tensor_bytes = size_t{64} << 20;
    auto session = Session::Create(*model, options);
    if (!session.ok()) {
      EXPECT_EQ(session.error().kind, ErrorKind::kUser) << session.error().message;
    }
  }
  EXPECT_GT(files, 0);
}

}  // namespace
}  // namespace seqto::runtime
