package e2e

import (
	"go.temporal.io/api/workflowservice/v1"
)

func workflowsQuery(q string) *workflowservice.ListWorkflowExecutionsRequest {
	return &workflowservice.ListWorkflowExecutionsRequest{Query: q}
}
