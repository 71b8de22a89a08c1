#include "eval/engine/weights.h"

#include <cmath>
#include <cstdint>

namespace kvtier::internal {
namespace {

// splitmix64: a tiny, well-mixed generator; one stream per tensor keeps the draw order-independent.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Symmetric() { return static_cast<float>(static_cast<double>(Next() >> 40) / (1ull << 23) - 1.0); }

 private:
  uint64_t state_;
};

std::vector<float> Uniform(uint64_t seed, uint64_t tensor, size_t n, float scale) {
  Rng rng(seed * 0x100000001b3ull + tensor * 0x9e3779b97f4a7c15ull + 1);
  std::vector<float> v(n);
  for (float& x : v) x = rng.Symmetric() * scale;
  return v;
}

std::vector<float> NormGains(uint64_t seed, uint64_t tensor, size_t n) {
  std::vector<float> v = Uniform(seed, tensor, n, 0.1f);
  for (float& x : v) x += 1.f;
  return v;
}

// Uniform(-a, a) has variance a^2/3; a = sqrt(3/fan_in) gives variance 1/fan_in.
float Scale(uint32_t fan_in) { return std::sqrt(3.f / static_cast<float>(fan_in)); }

}  // namespace

std::shared_ptr<const Weights> MakeRandomWeights(const ModelConfig& c) {
  auto w = std::make_shared<Weights>();
  const size_t h = c.hidden, q = size_t{c.q_heads} * c.head_dim, kv = size_t{c.kv_heads} * c.head_dim;
  uint64_t t = 0;
  w->embedding = Uniform(c.seed, t++, size_t{c.vocab} * h, 1.f);
  w->final_norm = NormGains(c.seed, t++, h);
  w->layers.resize(c.layers);
  for (uint32_t layer = 0; layer < c.layers; ++layer) {
    LayerWeights& l = w->layers[layer];
    l.attn_norm = NormGains(c.seed, t++, h);
    l.wq = Uniform(c.seed, t++, q * h, Scale(c.hidden));
    if (c.KindOf(layer) == LayerKind::kMla) {  // (classic configs draw the very tensors they always drew)
      const size_t rank = c.kv_lora_rank, nope = c.head_dim - c.rope_dim;
      l.wk = Uniform(c.seed, t++, size_t{c.latent_dim()} * h, Scale(c.hidden));
      l.w_uk = Uniform(c.seed, t++, c.q_heads * nope * rank, Scale(c.kv_lora_rank));
      l.w_uv = Uniform(c.seed, t++, q * rank, Scale(c.kv_lora_rank));
    } else {
      l.wk = Uniform(c.seed, t++, kv * h, Scale(c.hidden));
      l.wv = Uniform(c.seed, t++, kv * h, Scale(c.hidden));
    }
    l.wo = Uniform(c.seed, t++, h * q, Scale(static_cast<uint32_t>(q)) * 0.5f);
    l.mlp_norm = NormGains(c.seed, t++, h);
    l.w_gate = Uniform(c.seed, t++, size_t{c.ffn} * h, Scale(c.hidden));
    l.w_up = Uniform(c.seed, t++, size_t{c.ffn} * h, Scale(c.hidden));
    l.w_down = Uniform(c.seed, t++, h * c.ffn, Scale(c.ffn) * 0.5f);
  }
  return w;
}

}  // namespace kvtier::internal
