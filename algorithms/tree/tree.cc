#include "algorithms/tree/tree.h"

#include <initializer_list>

namespace strata::algorithms {
namespace {

int lowbit(int q) { return q & -q; }

int topOf(int n) {
  int r = 1;
  while (r * 2 <= n) r *= 2;
  return r;
}

// The child on one side of q, or 0: when the subtree there is cut off by n, the
// nearest node of it that exists (walking to left children) takes its place.
int childOf(int q, int n, bool right) {
  int half = lowbit(q) / 2;
  if (half == 0) return 0;
  int c = right ? q + half : q - half;
  while (c > n) {
    int h = lowbit(c) / 2;
    if (h == 0) return 0;
    c -= h;
  }
  return c > q || !right ? c : 0;
}

int parentOf(int q, int n) {
  if (q == topOf(n)) return 0;
  int p = q;
  do {
    int b = lowbit(p);
    p = (p & (2 * b)) ? p - b : p + b;
  } while (p > n);
  return p;
}

// Positions are rotated by `shift` before the tree is laid over them.
TreeLinks shifted(int n, int pos, int shift) {
  auto toQ = [&](int p) { return ((p - shift) % n + n) % n + 1; };
  auto toPos = [&](int q) { return ((q - 1 + shift) % n + n) % n; };
  TreeLinks t;
  int q = toQ(pos);
  int parent = parentOf(q, n);
  t.parent = parent ? toPos(parent) : -1;
  for (bool right : {false, true}) {
    int c = childOf(q, n, right);
    if (c) t.children[t.nchildren++] = toPos(c);
  }
  return t;
}

}  // namespace

TreeLinks binaryTree(int n, int pos) { return shifted(n, pos, 0); }

TreeLinks doubleTree(int n, int pos, int t) { return shifted(n, pos, t == 0 ? 0 : 1); }

TreeLinks rootedTree(int n, int pos, int rootPos) { return shifted(n, pos, rootPos - (topOf(n) - 1)); }

int treeDepth(int n) {
  int d = 0;
  for (int p = 0; p < n; ++p) {
    int level = 1;
    for (int q = p + 1; parentOf(q, n); q = parentOf(q, n)) ++level;
    if (level > d) d = level;
  }
  return d;
}

}  // namespace strata::algorithms
