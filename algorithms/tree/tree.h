// Binary trees over ring positions, for the tree algorithms. Pure arithmetic.
//
// The tree is the in-order binary tree over positions 1..n (written q = pos + 1):
// q's children are q -/+ lowbit(q)/2, and the root is the largest power of two
// <= n. Adjacent positions are joined at the lowest level, so with ranks placed in
// node order most leaf edges stay inside a node. Leaves are the odd q; shifting
// the positions by one for the second tree makes its leaves the even q, so in the
// double binary tree no rank is an inner node twice and each tree carries half the data.
#pragma once

namespace strata::algorithms {

struct TreeLinks {
  int parent = -1;           // position, or -1 at the root
  int children[2] = {-1, -1};
  int nchildren = 0;
};

// Links of `pos` in the in-order tree over n positions.
TreeLinks binaryTree(int n, int pos);
// Tree t (0 or 1) of the double binary tree: tree 1 is tree 0 shifted by one position.
TreeLinks doubleTree(int n, int pos, int t);
// A tree rooted at `rootPos` (broadcast, reduce): tree 0 rotated so its root falls there.
TreeLinks rootedTree(int n, int pos, int rootPos);
// Levels of the tree over n positions (1 for n = 1).
int treeDepth(int n);

}  // namespace strata::algorithms
