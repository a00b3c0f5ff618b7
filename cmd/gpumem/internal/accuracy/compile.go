package accuracy

import (
	"encoding/json"
	"fmt"

	"github.com/gpumem/gpumem/model"
)

// CompileField is a row's "compile": false or absent (eager), true
// (torchtune's compile=True: each decoder layer and the loss compiled,
// model.CompileLayers|model.CompileLoss), or a model.ParseCompile name.
type CompileField model.Compile

// UnmarshalJSON reads a boolean or a model.ParseCompile name.
func (c *CompileField) UnmarshalJSON(b []byte) error {
	var on bool
	if err := json.Unmarshal(b, &on); err == nil {
		*c = 0
		if on {
			*c = CompileField(model.CompileLayers | model.CompileLoss)
		}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("compile: want true, false or a scope name (layers, loss, layers+loss, model): %s", b)
	}
	v, err := model.ParseCompile(s)
	if err != nil {
		return err
	}
	*c = CompileField(v)
	return nil
}

// MarshalJSON writes the scope's name ("none" for eager).
func (c CompileField) MarshalJSON() ([]byte, error) { return json.Marshal(model.Compile(c).String()) }
