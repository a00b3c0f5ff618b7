package budget

import (
	"github.com/gpumem/gpumem"
	"github.com/gpumem/gpumem/model"
)

// checkBackend validates Job.Backend: a known backend, and for the CPU a
// job PyTorch's CPU kernels can run as the activation model describes
// them.
func (j *Job) checkBackend() error {
	switch {
	case j.Backend == model.CUDA:
		return nil
	case j.Backend != model.CPU:
		return gpumem.Errorf("Job.Backend", j.Backend, gpumem.ErrInvalid, "want cuda or cpu")
	case j.Runtime != PyTorch:
		return gpumem.Errorf("Job.Backend", j.Backend, gpumem.ErrUnsupported, "the CPU backend is PyTorch's (Runtime %s)", j.Runtime)
	case j.Attention == model.Flash:
		return gpumem.Errorf("Job.Backend", j.Backend, gpumem.ErrUnsupported, "flash_attention_2 has no CPU kernel; use eager or sdpa")
	}
	return nil
}
