
const (
	// GPULabel is the label added to nodes with GPU resource.
	GPULabel = "k8s.amazonaws.com/accelerator"
	// nodeNotPresentErr indicates no node with the given identifier present in AWS
	nodeNotPresentErr = "node is not present in aws"
)

var (
	availableGPUTypes = map[string]struct{}{
		"nvidia-tesla-k80":  {},
		"nvidia-tesla-p100": {},
		"nvidia-tesla-v100": {},
		"nvidia-tesla-t4":   {},
		"nvidia-tesla-a100": {},
		"nvidia-a10g":       {},
		"nvidia-l4":         {},
		"nvidia-l40s":       {},
	}
