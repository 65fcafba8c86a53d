package api

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gin-gonic/gin"
)

// openapiYAML is the API's OpenAPI 3.1 document. The API test suite
// validates every response it receives against it, and a test checks that
// it names exactly the router's routes, so it cannot drift.
//
//go:embed openapi.yaml
var openapiYAML []byte

var (
	openapiOnce sync.Once
	openapiDoc  *openapi3.T
	openapiJSON []byte
	openapiErr  error
)

// OpenAPI returns the parsed and validated document.
func OpenAPI() (*openapi3.T, error) {
	openapiOnce.Do(func() {
		loader := openapi3.NewLoader()
		openapiDoc, openapiErr = loader.LoadFromData(openapiYAML)
		if openapiErr != nil {
			return
		}
		addCommonResponses(openapiDoc)
		if openapiErr = openapiDoc.Validate(context.Background()); openapiErr != nil {
			openapiErr = fmt.Errorf("openapi: %w", openapiErr)
			return
		}
		openapiJSON, openapiErr = json.Marshal(openapiDoc)
	})
	return openapiDoc, openapiErr
}

// addCommonResponses adds the answers every operation can give, so the
// document does not repeat them: 500 INTERNAL_ERROR everywhere, and 429
// under /api, where the global rate-limit tier applies to every route.
func addCommonResponses(doc *openapi3.T) {
	internal := &openapi3.ResponseRef{Ref: "#/components/responses/InternalError", Value: doc.Components.Responses["InternalError"].Value}
	forbidden := &openapi3.ResponseRef{Ref: "#/components/responses/Forbidden", Value: doc.Components.Responses["Forbidden"].Value}
	modeParam := &openapi3.ParameterRef{Ref: "#/components/parameters/dashboardMode", Value: doc.Components.Parameters["dashboardMode"].Value}
	limited := &openapi3.ResponseRef{Ref: "#/components/responses/RateLimited", Value: doc.Components.Responses["RateLimited"].Value}
	for path, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.Responses.Value("500") == nil {
				op.Responses.Set("500", internal)
			}
			if strings.HasPrefix(path, "/api/") && op.Responses.Value("429") == nil {
				op.Responses.Set("429", limited)
			}
			if takesKey(op) {
				// A dashboard session acts on every KEY route in the mode of
				// ?mode= (live needs an approved KYB application: 403).
				*op.Security = append(*op.Security, openapi3.SecurityRequirement{"session": []string{}})
				if op.Parameters.GetByInAndName("query", "mode") == nil {
					op.Parameters = append(op.Parameters, modeParam)
				}
				if op.Responses.Value("403") == nil {
					op.Responses.Set("403", forbidden)
				}
			}
		}
	}
}

func (s *Server) registerOpenAPI(g *gin.RouterGroup) {
	s.Handle(g, http.MethodGet, "/openapi.json", AuthNone, func(c *gin.Context) {
		if _, err := OpenAPI(); err != nil {
			fail(c, err)
			return
		}
		c.Data(http.StatusOK, "application/json", openapiJSON)
	})
}

// takesKey says whether an operation is a KEY route (its security names
// apiKey).
func takesKey(op *openapi3.Operation) bool {
	if op.Security == nil {
		return false
	}
	for _, req := range *op.Security {
		if _, ok := req["apiKey"]; ok {
			return true
		}
	}
	return false
}
