//go:build tools

// This file pins the service's direct dependencies while packages are being
// written, so `go mod tidy` keeps them. It is never built.
package paygate

import (
	_ "github.com/compose-spec/compose-go/v2/loader"
	_ "github.com/ethereum/go-ethereum/ethclient"
	_ "github.com/ethereum/go-ethereum/ethclient/simulated"
	_ "github.com/ethereum/go-ethereum/node"
	_ "github.com/gagliardetto/solana-go"
	_ "github.com/gagliardetto/solana-go/rpc"
	_ "github.com/getkin/kin-openapi/openapi3"
	_ "github.com/gin-gonic/gin"
	_ "github.com/glebarez/sqlite"
	_ "github.com/go-gormigrate/gormigrate/v2"
	_ "github.com/google/uuid"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "go.temporal.io/sdk/client"
	_ "go.temporal.io/sdk/testsuite"
	_ "golang.org/x/crypto/bcrypt"
	_ "gorm.io/driver/postgres"
	_ "gorm.io/gorm"
)
