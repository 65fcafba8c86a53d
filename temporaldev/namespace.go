package temporaldev

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrSearchAttributeConflict is returned (wrapped) by RegisterSearchAttributes
// when a name is already registered with another type, or is a system search
// attribute. Temporal cannot change a search attribute's type in place.
var ErrSearchAttributeConflict = errors.New("search attribute conflict")

// DefaultRetention is how long closed workflows stay inspectable when
// Options.Retention is zero. The dev namespace's own default is 24h.
const DefaultRetention = 30 * 24 * time.Hour

// PaygateSearchAttributes returns the custom search attributes paygate's
// workflows upsert, so operators can filter checkout sessions,
// subscriptions and failed webhook deliveries in the Web UI and with
// ListWorkflow queries (shared/DESIGN.md section 5). Subscriptions share
// MerchantId and Network.
func PaygateSearchAttributes() map[string]enumspb.IndexedValueType {
	return map[string]enumspb.IndexedValueType{
		"CheckoutStatus":     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		"MerchantId":         enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		"Network":            enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		"PaymentLinkId":      enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		"SubscriptionStatus": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		"CustomerId":         enumspb.INDEXED_VALUE_TYPE_KEYWORD,
		"DeliveryStatus":     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	}
}

// registerAttempts bounds the list-then-add rounds RegisterSearchAttributes
// makes when another process registers the same attributes concurrently.
const registerAttempts = 3

// RegisterSearchAttributes makes sure every attribute in attrs is registered
// in namespace with its type, through the operator service. It adds only the
// missing ones and is idempotent: an attribute that exists with the same type
// is fine, a concurrent registration ("already exists") counts as success,
// and a name that exists with another type is an ErrSearchAttributeConflict.
//
// Search attributes passed to a server at start are ignored on an existing
// database, so the dev server calls this at every boot; `paygate worker`
// calls it against an external Temporal too.
func RegisterSearchAttributes(ctx context.Context, c client.Client, namespace string, attrs map[string]enumspb.IndexedValueType) error {
	_, err := registerSearchAttributes(ctx, c, namespace, attrs)
	return err
}

// registerSearchAttributes is RegisterSearchAttributes, also reporting
// whether this call added any.
func registerSearchAttributes(ctx context.Context, c client.Client, namespace string, attrs map[string]enumspb.IndexedValueType) (bool, error) {
	var addErr error
	for range registerAttempts {
		missing, err := missingSearchAttributes(ctx, c, namespace, attrs)
		if err != nil || len(missing) == 0 {
			return false, err
		}
		_, addErr = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace:        namespace,
			SearchAttributes: missing,
		})
		if addErr == nil {
			return true, nil
		}
		// Another process may have won a race for the same names (or for the
		// storage columns the SQL visibility store maps them to): list again.
		var exists *serviceerror.AlreadyExists
		var unavailable *serviceerror.Unavailable
		if !errors.As(addErr, &exists) && !errors.As(addErr, &unavailable) {
			break
		}
	}
	return false, fmt.Errorf("adding search attributes to namespace %q: %w", namespace, addErr)
}

// missingSearchAttributes returns the attributes of want that namespace lacks.
func missingSearchAttributes(ctx context.Context, c client.Client, namespace string, want map[string]enumspb.IndexedValueType) (map[string]enumspb.IndexedValueType, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("listing search attributes of namespace %q: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		typ := want[name]
		if _, ok := resp.GetSystemAttributes()[name]; ok {
			return nil, fmt.Errorf("%w: %s is a system search attribute", ErrSearchAttributeConflict, name)
		}
		have, ok := resp.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = typ
		case have != typ:
			return nil, fmt.Errorf("%w: %s is registered as %s in namespace %q, want %s",
				ErrSearchAttributeConflict, name, have, namespace, typ)
		}
	}
	return missing, nil
}

// EnsureRetention raises namespace's workflow execution retention to at least
// retention, so closed workflows stay inspectable (the dev server's default
// namespace keeps them 24h). It never lowers a longer retention an operator
// chose. Retention given at start is ignored on an existing database, so the
// dev server calls this at every boot; `paygate worker` calls it too.
func EnsureRetention(ctx context.Context, c client.Client, namespace string, retention time.Duration) error {
	desc, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("describing namespace %q: %w", namespace, err)
	}
	if desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration() >= retention {
		return nil
	}
	_, err = c.WorkflowService().UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
		Namespace: namespace,
		Config:    &namespacepb.NamespaceConfig{WorkflowExecutionRetentionTtl: durationpb.New(retention)},
	})
	if err != nil {
		return fmt.Errorf("setting retention of namespace %q to %s: %w", namespace, retention, err)
	}
	return nil
}
