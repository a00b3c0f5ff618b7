package model

// ActivationModel: a Spec prepared once for many activation estimates.

// ActivationModel is a Spec prepared for repeated activation estimates
// (a scheduler's hot path: budget.NewModel builds one per model). What
// the activation model derives from the Spec alone — the checks of
// [Spec.CheckActivations], the Spec's block layout (a switch over its
// Family) and its decoder block's description (norms, activation,
// softmax dtype, held tensors: a family's map lookups) — is computed
// once by [NewActivationModel] instead of on every
// [Spec.AppendActivations]. Its answers are those of
// [Spec.AppendActivations] for the Spec it was made from.
type ActivationModel struct {
	// s is the prepared Spec, a copy: its pointer identifies it inside
	// the calculation (actCalc.top), where the cached layout and block
	// description stand for layoutOf(s) and actFamily(s).
	s Spec
	// lay is layoutOf(&s).
	lay layout
	// bl is actFamily(&s) with its autocast norm readers filled, as
	// decoderOnly derives them.
	bl actBlock
}

// NewActivationModel checks s as [Spec.CheckActivations] does and
// returns it prepared. The Spec is copied; what its pointer fields
// (Text, Vision, Encoder, Inventory) point to must not change while the
// ActivationModel is used.
func NewActivationModel(s Spec) (*ActivationModel, error) {
	if err := s.CheckActivations(); err != nil {
		return nil, err
	}
	m := &ActivationModel{s: s}
	m.lay = layoutOf(&m.s)
	m.bl = actFamily(&m.s)
	m.bl.qkvIn, m.bl.mlpIn = autocastNormReaders(&m.s, &m.bl)
	return m, nil
}

// Spec returns a copy of the Spec m was made from.
func (m *ActivationModel) Spec() Spec { return m.s }

// AppendActivations is [Spec.AppendActivations] of m's Spec: the
// per-block figures appended to dst[:0]; the Workload is checked.
func (m *ActivationModel) AppendActivations(dst []LayerActivations, w Workload) (Activations, error) {
	return m.s.appendPrepared(dst, w, m)
}

// layoutOf is layoutOf(s), from the prepared model when s is its Spec.
func (c *actCalc) layoutOf(s *Spec) layout {
	if c.prep != nil && s == &c.prep.s {
		return c.prep.lay
	}
	return layoutOf(s)
}

// decoderBlock is actFamily(s) with its autocast norm readers filled,
// from the prepared model when s is its Spec.
func (c *actCalc) decoderBlock(s *Spec) actBlock {
	if c.prep != nil && s == &c.prep.s {
		return c.prep.bl
	}
	bl := actFamily(s)
	bl.qkvIn, bl.mlpIn = autocastNormReaders(s, &bl)
	return bl
}
