package main

import (
	"math"

	"github.com/gpumem/gpumem"
)

// freeIndex orders a fleet's GPUs by (free memory, index in the fleet):
// a treap whose nodes are the GPUs themselves, one per fleet slot, linked
// by slot number, so that no operation allocates. It answers the two
// questions Schedule asks in O(log n) expected time:
//
//   - atLeast(n): the GPU with the least free memory ≥ n, the lowest
//     index among equals (the tightest fit);
//   - most(): the GPU with the most free memory, the lowest index among
//     equals (the smallest shortfall);
//
// and update(i, free) moves one GPU after Reserve. Priorities are a hash
// of the slot number (SplitMix64's finalizer), so the tree's shape, and
// Schedule's decisions, are the same on every run.
type freeIndex struct {
	nodes []freeNode
	root  int32 // -1 when empty
}

type freeNode struct {
	free        gpumem.Bytes
	prio        uint64
	left, right int32 // slot numbers, -1 for none
}

// newFreeIndex indexes the devices' free memory.
func newFreeIndex(devs []gpumem.Device) freeIndex {
	x := freeIndex{nodes: make([]freeNode, len(devs)), root: -1}
	for i := range devs {
		z := uint64(i) + 0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		x.nodes[i] = freeNode{free: devs[i].Free(), prio: z ^ z>>31, left: -1, right: -1}
		x.root = x.insert(x.root, int32(i))
	}
	return x
}

// less orders slots by free memory, then by slot number.
func (x *freeIndex) less(a, b int32) bool {
	fa, fb := x.nodes[a].free, x.nodes[b].free
	return fa < fb || fa == fb && a < b
}

// insert adds slot i to the subtree t and returns the subtree's root.
func (x *freeIndex) insert(t, i int32) int32 {
	if t < 0 {
		return i
	}
	if x.nodes[i].prio > x.nodes[t].prio {
		x.nodes[i].left, x.nodes[i].right = x.split(t, i)
		return i
	}
	if x.less(i, t) {
		x.nodes[t].left = x.insert(x.nodes[t].left, i)
	} else {
		x.nodes[t].right = x.insert(x.nodes[t].right, i)
	}
	return t
}

// split divides the subtree t into the slots ordered before slot i and
// those after it (i itself is not in t).
func (x *freeIndex) split(t, i int32) (l, r int32) {
	if t < 0 {
		return -1, -1
	}
	if x.less(t, i) {
		x.nodes[t].right, r = x.split(x.nodes[t].right, i)
		return t, r
	}
	l, x.nodes[t].left = x.split(x.nodes[t].left, i)
	return l, t
}

// merge joins two subtrees, every slot of l ordered before every slot
// of r.
func (x *freeIndex) merge(l, r int32) int32 {
	switch {
	case l < 0:
		return r
	case r < 0:
		return l
	case x.nodes[l].prio > x.nodes[r].prio:
		x.nodes[l].right = x.merge(x.nodes[l].right, r)
		return l
	}
	x.nodes[r].left = x.merge(l, x.nodes[r].left)
	return r
}

// remove takes slot i out of the subtree t and returns the subtree's
// root.
func (x *freeIndex) remove(t, i int32) int32 {
	if t == i {
		return x.merge(x.nodes[i].left, x.nodes[i].right)
	}
	if x.less(i, t) {
		x.nodes[t].left = x.remove(x.nodes[t].left, i)
	} else {
		x.nodes[t].right = x.remove(x.nodes[t].right, i)
	}
	return t
}

// update records slot i's new free memory.
func (x *freeIndex) update(i int, free gpumem.Bytes) {
	x.root = x.remove(x.root, int32(i))
	x.nodes[i] = freeNode{free: free, prio: x.nodes[i].prio, left: -1, right: -1}
	x.root = x.insert(x.root, int32(i))
}

// atLeast returns the first slot in (free, index) order with free ≥ n,
// and its free memory; -1 when every GPU has less.
func (x *freeIndex) atLeast(n gpumem.Bytes) (int, gpumem.Bytes) {
	found := int32(-1)
	for t := x.root; t >= 0; {
		if x.nodes[t].free >= n {
			found, t = t, x.nodes[t].left
		} else {
			t = x.nodes[t].right
		}
	}
	if found < 0 {
		return -1, 0
	}
	return int(found), x.nodes[found].free
}

// above returns the first slot with free memory strictly more than f,
// and its free memory; -1 when none has more.
func (x *freeIndex) above(f gpumem.Bytes) (int, gpumem.Bytes) {
	if f == math.MaxInt64 {
		return -1, 0
	}
	return x.atLeast(f + 1)
}

// most returns the slot with the most free memory, the lowest among
// equals; -1 when the index is empty.
func (x *freeIndex) most() int {
	t := x.root
	if t < 0 {
		return -1
	}
	for x.nodes[t].right >= 0 {
		t = x.nodes[t].right
	}
	i, _ := x.atLeast(x.nodes[t].free)
	return i
}
