// Package request owns gpumem's job requests: the JSON bodies of gpumem
// serve (Estimate for POST /v1/estimate, Plan, Pipeline, OOM, Leak), the
// command line's estimate flags that share their fields (Flags), and the
// one validation both go through, which turns a request into a
// budget.Job, its budget.Model and the device to check it on.
//
// The schema is the Estimate type: one JSON field per gpumem estimate
// flag, "-" written "_" (lora_rank is --lora-rank), the fields left out
// taking the flags' registered defaults (Default). The fields' meanings
// are documented once, in the table of cmd/gpumem/README.md ("POST
// /v1/estimate"), and in the flags' help (Flags.Register).
//
// Three steps, each naming the request field at fault in an *Error:
//
//   - Decode reads the body strictly: one JSON object, no unknown field,
//     no trailing data, each field of its JSON type.
//   - Cache.Check checks the values field by field, with the functions
//     the command line's flags go through (Flags.JobWith and its helpers),
//     and finds the model: a catalog name (model.Lookup), an inline
//     config.json (model.FromHFConfig) or a checkpoint's header; the
//     first two are kept in the Cache once checked (by name, by SHA-256).
//   - Cache.JobWith builds the budget.Job, its Model prepared by
//     budget.NewModel once per model and fine-tuning setup and kept in the
//     Cache (keyed by the catalog name or the SHA-256 of the inline bytes,
//     and every field of model.Finetune the request fills), so that a
//     request seen before costs its checks and the job's fields.
//
// Cache.Prepare runs the three; Evaluate estimates a job and checks its
// fit on its device with the headroom budget.DefaultHeadroom leaves, as
// gpumem estimate does. gpumem serve answers with these, and so do the
// Kubernetes components of the nested module kube/, in process.
//
// The command line registers the same fields as flags (Flags.Register)
// and builds its job with Flags.JobFor; its messages name the flags
// (--lora-rank), which ForRequest and LibraryError rewrite as the request
// fields (lora_rank) for a request.
package request
