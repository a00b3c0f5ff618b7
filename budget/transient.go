package budget

import "github.com/gpumem/gpumem/model"

// convolutional reports whether s is a vision backbone whose blocks have
// no attention: ResNet's bottleneck and basic blocks, ConvNeXt's
// depthwise-convolution blocks and EfficientNet's MBConv blocks
// (transformers' modeling_resnet.py, modeling_convnext.py,
// modeling_efficientnet.py). Their largest block transient is
// Breakdown.Transient. Swin, the one backbone with attention (windowed
// self-attention, modeling_swin.py's SwinSelfAttention), reports its
// block transient as Breakdown.Attention like every transformer.
func convolutional(s *model.Spec) bool {
	return s.Backbone != nil && s.Family != "swin"
}
