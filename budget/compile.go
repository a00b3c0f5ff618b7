package budget

import "github.com/gpumem/gpumem"

// validateCompile checks Job.Compile: torch.compile is PyTorch's, and the
// activation model derives what it saves for training steps only
// (model.Compile; the architecture and kernel checks are the model's,
// model.Spec.CheckCompile).
func (j *Job) validateCompile() error {
	if j.Compile == 0 {
		return nil
	}
	if j.Runtime != PyTorch {
		return gpumem.Errorf("Job.Compile", j.Compile.String(), gpumem.ErrUnsupported,
			"torch.compile compiles a PyTorch job; the %s runtime runs its own kernels (leave the compilation out)", j.Runtime)
	}
	if j.Mode != Training {
		return gpumem.Errorf("Job.Compile", j.Compile.String(), gpumem.ErrUnsupported,
			"compilation is modelled for training steps (what the partitioner saves for backward); a %s job saves nothing", j.Mode)
	}
	_, _, _, dt := j.Precision.dtypes()
	return j.Model.spec.CheckCompile("Job.Compile", workload(j, dt))
}
