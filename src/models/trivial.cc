// "trivial": as cheap as a model can be (global average pool and one dense layer), so
// that the input pipeline decides the speed.
#include "models/zoo.h"

namespace cohort {

void build_trivial(Graph& g, int classes) {
  int h = g.global_avg_pool(g.input(), "pool");
  g.dense(h, "fc", classes);
}

}  // namespace cohort
