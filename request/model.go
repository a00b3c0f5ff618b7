package request

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// WithHead returns s with the task head named (--head, request "head");
// an empty name keeps the config's. A checkpoint's tensor list fixes its
// head, so it takes none.
func WithHead(s model.Spec, name string) (model.Spec, error) {
	if name == "" {
		return s, nil
	}
	h, err := model.ParseHead(name)
	if err != nil {
		return s, fmt.Errorf("want %s", strings.Join(model.HeadNames(), ", "))
	}
	if s.Inventory != nil {
		return s, errors.New("a checkpoint's tensors fix the head (give --model or --config)")
	}
	if s.Text != nil || s.Vision != nil {
		return s, fmt.Errorf("a %s model has no %s head modelled", s.Family, h)
	}
	s.Head = h
	if err := s.Validate(); err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) && fe.Field == "Spec.Head" {
			return s, fmt.Errorf("a %s model has no %s head modelled", s.Family, h)
		}
		return s, err
	}
	return s, nil
}

// WithLabels returns s with the classifier's num_labels (--labels,
// request "labels"); zero keeps the config's.
func WithLabels(s model.Spec, n int) (model.Spec, error) {
	switch {
	case n == 0:
		return s, nil
	case n < 0 || n > 1<<24:
		return s, errors.New("want 1 to 16777216 labels")
	case s.Head != model.HeadSeqCls && s.Head != model.HeadTokenCls && s.Head != model.HeadImageCls:
		return s, fmt.Errorf("a %s head has no labels (give --head seq-cls, token-cls or image-cls)", s.Head)
	}
	s.Labels = int64(n)
	return s, nil
}

// WithImageSize returns s with a vision backbone's image side
// (--image-size, request "image_size"); zero keeps the config's.
func WithImageSize(s model.Spec, n int) (model.Spec, error) {
	switch {
	case n == 0:
		return s, nil
	case s.Backbone == nil:
		return s, fmt.Errorf("%s is not a vision backbone (resnet, convnext, swin or efficientnet); a ViT's image size is its config's image_size, which sizes its position table", s.Name)
	case n < 0 || n > 1<<16:
		return s, errors.New("want 1 to 65536 pixels")
	}
	s.Image.Size = int64(n)
	if err := s.Validate(); err != nil {
		var fe *gpumem.FieldError
		if errors.As(err, &fe) {
			return s, fe.Err
		}
		return s, err
	}
	return s, nil
}
