package budget

// String is the DeepSpeed config file that runs the plan (MarshalIndent:
// JSON indented two spaces), so that fmt.Println(cfg) prints what
// deepspeed --deepspeed_config reads.
func (c DeepSpeedConfig) String() string {
	b, err := c.MarshalIndent()
	if err != nil {
		return "DeepSpeedConfig: " + err.Error()
	}
	return string(b)
}

// String is the accelerate config file that runs the plan (YAML, as
// accelerate writes it), so that fmt.Println(cfg) prints what accelerate
// launch --config_file reads.
func (c AccelerateConfig) String() string {
	b, err := c.YAML()
	if err != nil {
		return "AccelerateConfig: " + err.Error()
	}
	return string(b)
}
