// The tree shapes: every tree spans all positions once, parents and children
// agree, depth stays logarithmic, and the double binary tree never makes a
// position an inner node twice.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "algorithms/tree/tree.h"

namespace strata::algorithms {
namespace {

// Checks one tree given as links per position; returns its root.
int checkTree(int n, const std::vector<TreeLinks>& t) {
  int roots = 0, root = -1;
  for (int p = 0; p < n; ++p) {
    if (t[p].parent < 0) {
      ++roots;
      root = p;
      continue;
    }
    const TreeLinks& up = t[t[p].parent];
    int listed = 0;
    for (int k = 0; k < up.nchildren; ++k) listed += up.children[k] == p;
    EXPECT_EQ(listed, 1) << "n=" << n << ": " << p << " is not a child of its parent " << t[p].parent;
  }
  EXPECT_EQ(roots, 1) << "n=" << n;
  int levels = 0;
  for (int p = 0; p < n; ++p) {  // every position reaches the root within log2(n) + 1 levels
    int steps = 1;
    for (int q = p; t[q].parent >= 0 && steps <= n; q = t[q].parent) ++steps;
    EXPECT_LE(steps, n) << "n=" << n << ": cycle above " << p;
    levels = std::max(levels, steps);
  }
  EXPECT_LE(levels, static_cast<int>(std::floor(std::log2(n))) + 1) << "n=" << n;
  EXPECT_EQ(levels, treeDepth(n)) << "n=" << n;
  return root;
}

TEST(Tree, DoubleBinaryTreesSpanAndShareNoInnerNode) {
  for (int n = 1; n <= 130; ++n) {
    std::vector<TreeLinks> t0(n), t1(n);
    for (int p = 0; p < n; ++p) {
      t0[p] = doubleTree(n, p, 0);
      t1[p] = doubleTree(n, p, 1);
      EXPECT_EQ(t0[p].nchildren, binaryTree(n, p).nchildren);
    }
    checkTree(n, t0);
    checkTree(n, t1);
    for (int p = 0; p < n; ++p)
      EXPECT_FALSE(t0[p].nchildren > 0 && t1[p].nchildren > 0) << "n=" << n << ": " << p << " is inner twice";
  }
}

TEST(Tree, RootedTreesAreRootedWhereAsked) {
  for (int n = 1; n <= 40; ++n)
    for (int root = 0; root < n; ++root) {
      std::vector<TreeLinks> t(n);
      for (int p = 0; p < n; ++p) t[p] = rootedTree(n, p, root);
      EXPECT_EQ(checkTree(n, t), root) << "n=" << n;
    }
}

TEST(Tree, SmallShapes) {
  // n = 4: positions 0..3 are q = 1..4; q = 4 is the root with child 2; 2 has 1 and 3.
  TreeLinks r = binaryTree(4, 3);
  EXPECT_EQ(r.parent, -1);
  ASSERT_EQ(r.nchildren, 1);
  EXPECT_EQ(r.children[0], 1);
  TreeLinks m = binaryTree(4, 1);
  EXPECT_EQ(m.parent, 3);
  ASSERT_EQ(m.nchildren, 2);
  EXPECT_EQ(m.children[0], 0);
  EXPECT_EQ(m.children[1], 2);
  EXPECT_EQ(treeDepth(1), 1);
  EXPECT_EQ(treeDepth(8), 4);
}

}  // namespace
}  // namespace strata::algorithms
