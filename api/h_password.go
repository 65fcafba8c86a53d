package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/notify"
)

// A merchant's password: changed from a signed-in session (the current one
// checked), or set anew from a link e-mailed to the account's address. Both
// sign out the account's other sessions: whoever held one (a leaked token,
// a computer left signed in) is out.

const (
	// resetTTL is how long a reset link works.
	resetTTL = time.Hour
	// resetsPerHour is how many reset e-mails an account is sent in an
	// hour at most, whoever asks.
	resetsPerHour = 5
	// mailsAtOnce bounds the e-mails (reset and confirmation links) being
	// sent at once.
	mailsAtOnce = 8
	// mailTimeout bounds one e-mail's sending.
	mailTimeout = 30 * time.Second
)

type changePasswordRequest struct {
	CurrentPassword string `json:"currentPassword"`
	NewPassword     string `json:"newPassword"`
}

// changePassword serves POST /api/auth/password: the current password is
// checked as a sign-in is (the account's turn, its failure limit, a wrong
// one counted), then the new one replaces it and the account's other
// sessions are signed out. The calling session stays signed in.
func (s *Server) changePassword(c *gin.Context) {
	var req changePasswordRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	checkGivenPassword(&v, "currentPassword", req.CurrentPassword)
	checkPassword(&v, "newPassword", req.NewPassword)
	if req.NewPassword != "" && req.NewPassword == req.CurrentPassword {
		v.Add("newPassword", "must differ from the current password")
	}
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	m, err := s.Store.Merchant(c.Request.Context(), p.MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	release, err := s.accountTurn(c, m.Email)
	if err != nil {
		fail(c, err)
		return
	}
	defer release()
	// A stolen session must not find the password by guessing here either.
	if s.Accounts != nil && !s.Accounts.AllowAccount(c, m.Email) {
		return
	}
	var wrong bool
	var newHash string
	var hashErr error
	if werr := s.passwords.hash(c.Request.Context(), func() {
		if wrong = auth.CheckPassword(m.PasswordHash, req.CurrentPassword) != nil; !wrong {
			newHash, hashErr = auth.HashPassword(req.NewPassword)
		}
	}); werr != nil {
		fail(c, werr)
		return
	}
	if wrong {
		s.recordLoginFailure(c, m.Email)
		fail(c, apperr.Invalid("currentPassword", "is not the account's password"))
		return
	}
	if hashErr != nil {
		fail(c, hashErr)
		return
	}
	revoked, err := s.Store.ChangePassword(c.Request.Context(), m.ID, m.PasswordHash, newHash, p.SessionID)
	if err != nil {
		fail(c, err)
		return
	}
	s.Logger.Info("password changed", "merchantId", m.ID, "sessionsSignedOut", revoked, "requestId", requestID(c))
	respond(c, http.StatusOK, gin.H{"sessionsSignedOut": revoked})
}

// passwordHolds checks the account's current password as a password change
// does (the account's turn, its failed-sign-in lockout, the hashing pool);
// false: the answer is written.
func (s *Server) passwordHolds(c *gin.Context, m *models.Merchant, field, password string) bool {
	release, err := s.accountTurn(c, m.Email)
	if err != nil {
		fail(c, err)
		return false
	}
	defer release()
	if s.Accounts != nil && !s.Accounts.AllowAccount(c, m.Email) {
		return false
	}
	var wrong bool
	if werr := s.passwords.hash(c.Request.Context(), func() { wrong = auth.CheckPassword(m.PasswordHash, password) != nil }); werr != nil {
		fail(c, werr)
		return false
	}
	if wrong {
		s.recordLoginFailure(c, m.Email)
		fail(c, apperr.Invalid(field, "is not the account's password"))
		return false
	}
	return true
}

// logoutOthers serves POST /api/auth/logout-others: every other session of
// the account is signed out, the calling one stays.
func (s *Server) logoutOthers(c *gin.Context) {
	p := principal(c)
	revoked, err := s.Store.RevokeOtherDashboardSessions(c.Request.Context(), p.MerchantID, p.SessionID)
	if err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, gin.H{"sessionsSignedOut": revoked})
}

// accountTurn takes the account's sign-in turn in this process, then
// across the API replicas (the rate limiter's shared store), and returns
// their release: call it after a failure, if any, is counted, so that the
// next check reads it.
func (s *Server) accountTurn(c *gin.Context, email string) (func(), error) {
	ctx := c.Request.Context()
	release, err := s.passwords.account(ctx, email)
	if err != nil || s.Accounts == nil {
		return release, err
	}
	shared, err := s.Accounts.AccountTurn(ctx, c.ClientIP(), email)
	if err != nil {
		release()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errPasswordBusy
	}
	return func() { shared(); release() }, nil
}

// newDashboardSession is the session a sign-up or sign-in opens with token,
// noting the browser and the address it came from.
func (s *Server) newDashboardSession(c *gin.Context, merchantID, token string) *models.DashboardSession {
	return &models.DashboardSession{MerchantID: merchantID, TokenHash: s.Hasher.Hash(token), ExpiresAt: s.Store.Now().Add(s.SessionTTL),
		UserAgent: cutUTF8(strings.ToValidUTF8(c.Request.UserAgent(), ""), 300), ClientIP: cutUTF8(c.ClientIP(), 64)}
}

// cutUTF8 cuts s to at most n bytes, never inside a character.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

type signedInJSON struct {
	ID        string `json:"id"`
	Current   bool   `json:"current"`
	CreatedAt Time   `json:"createdAt"`
	ExpiresAt Time   `json:"expiresAt"`
	UserAgent string `json:"userAgent"`
	IPAddress string `json:"ipAddress"`
}

// listSessions serves GET /api/auth/sessions: the account's signed-in
// sessions (the newest 100), the caller's marked current.
func (s *Server) listSessions(c *gin.Context) {
	p := principal(c)
	list, err := s.Store.OpenDashboardSessions(c.Request.Context(), p.MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	out := make([]signedInJSON, 0, len(list))
	for _, d := range list {
		out = append(out, signedInJSON{ID: d.ID, Current: d.ID == p.SessionID, CreatedAt: ts(d.CreatedAt), ExpiresAt: ts(d.ExpiresAt),
			UserAgent: d.UserAgent, IPAddress: d.ClientIP})
	}
	respond(c, http.StatusOK, out)
}

// revokeSession serves DELETE /api/auth/sessions/{id}: one of the
// account's sessions is signed out (the caller's own too: a logout).
// Another account's, an unknown or an ended session is 404.
func (s *Server) revokeSession(c *gin.Context) {
	id, err := pathID(c.Param("id"))
	if err != nil {
		fail(c, err)
		return
	}
	p := principal(c)
	if err := s.Store.RevokeOwnDashboardSession(c.Request.Context(), p.MerchantID, id); err != nil {
		fail(c, err)
		return
	}
	respond(c, http.StatusOK, gin.H{"id": id, "signedOut": true, "current": id == p.SessionID})
}

type resetRequest struct {
	Email string `json:"email"`
}

// resetAccepted is the answer to every well-formed reset request, whether
// or not an account uses the address: the answer tells a stranger nothing.
const resetAccepted = "if an account uses this e-mail address, a link to choose a new password is on its way; it works for one hour"

// requestPasswordReset serves POST /api/auth/password-reset: when an
// account uses the address (and was sent fewer than resetsPerHour links in
// the past hour), a new link is stored and e-mailed, after the answer, so
// that its time does not tell either.
func (s *Server) requestPasswordReset(c *gin.Context) {
	var req resetRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	email := v.email("email", req.Email, true)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if s.Mailer == nil || s.ResetBaseURL == "" {
		fail(c, apperr.Unavailable("password reset e-mails are not set up on this server; ask its operator", apperr.NoRetry))
		return
	}
	ctx := c.Request.Context()
	m, err := s.Store.MerchantByEmail(ctx, email)
	if errors.Is(err, apperr.ErrNotFound) {
		respondMessage(c, http.StatusAccepted, resetAccepted)
		return
	}
	if err != nil {
		fail(c, err)
		return
	}
	token, err := auth.GenerateResetToken()
	if err != nil {
		fail(c, err)
		return
	}
	created, err := s.Store.CreatePasswordReset(ctx, m.ID, m.Email, s.Hasher.Hash(token), resetTTL, resetsPerHour)
	if errors.Is(err, models.ErrAddressChanged) {
		// The account left this address meanwhile: the address's reader
		// gets no link (and the answer is the same as for no account).
		respondMessage(c, http.StatusAccepted, resetAccepted)
		return
	}
	if err != nil {
		fail(c, err)
		return
	}
	if !created {
		s.Logger.Warn("password reset not sent: the account's hourly number was reached", "merchantId", m.ID, "requestId", requestID(c))
		respondMessage(c, http.StatusAccepted, resetAccepted)
		return
	}
	msg := notify.Message{To: m.Email, Subject: "Choose a new paygate password", Body: resetMailBody(
		strings.TrimRight(s.ResetBaseURL, "/")+"/dashboard/reset?token="+token, m.EmailConfirmedAt == nil)}
	s.mailLater(c, m.ID, msg, "password reset")
	respondMessage(c, http.StatusAccepted, resetAccepted)
}

// mailLater sends msg after the answer (what names it in the log), unless
// mailsAtOnce e-mails are being sent already: then it is not sent (the
// merchant asks again) and the answer stays the same.
func (s *Server) mailLater(c *gin.Context, merchantID string, msg notify.Message, what string) {
	rid := requestID(c)
	select {
	case s.mails <- struct{}{}:
	default:
		s.Logger.Warn(what+" e-mail not sent: too many being sent", "merchantId", merchantID, "requestId", rid)
		return
	}
	go func() {
		defer func() { <-s.mails }()
		ctx, cancel := context.WithTimeout(context.Background(), mailTimeout)
		defer cancel()
		if err := s.Mailer.Send(ctx, msg); err != nil {
			s.Logger.Error(what+" e-mail failed", "merchantId", merchantID, "err", err, "requestId", rid)
		}
	}()
}

// resetMailBody is the reset e-mail. It names no business: an account's
// name is whatever its signer-up typed (anyone may sign up with any
// address), and a reset sent to the address's owner must not carry a
// stranger's text ("your account is frozen, call …"). For an account whose
// address was never confirmed it says what setting the password takes back.
func resetMailBody(link string, unconfirmed bool) string {
	more := ""
	if unconfirmed {
		more = `
This address was never confirmed for the account: whoever signed up with it may not be you. Choosing a
password confirms it and removes what was set up before: the API keys, the webhook endpoints, the
receiving wallets and their proofs, and a KYB application not yet approved. Set them up again yourself.
`
	}
	return fmt.Sprintf(`Hello,

someone (we hope you) asked to choose a new password for your paygate account. Open this link within an hour to choose it:

%s

The link works once. Choosing a new password signs out every session of the account.
%sIf you did not ask, ignore this e-mail: your password stays as it is.
`, link, more)
}

type confirmResetRequest struct {
	Token       string `json:"token"`
	NewPassword string `json:"newPassword"`
}

var errResetToken = apperr.Invalid("token", "is not a valid reset link, or it was used, replaced by a newer one or expired (ask for a new link)")

// confirmPasswordReset serves POST /api/auth/password-reset/confirm: the
// link's token sets the new password once, and every session of the
// account is signed out.
func (s *Server) confirmPasswordReset(c *gin.Context) {
	var req confirmResetRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	token := strings.TrimSpace(req.Token)
	if token == "" {
		v.Add("token", "is required")
	}
	checkPassword(&v, "newPassword", req.NewPassword)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if !strings.HasPrefix(token, auth.ResetPrefix) || len(token) > 128 {
		fail(c, errResetToken)
		return
	}
	r, err := lookupRotating(c, s, token, s.Store.PasswordResetByHash, func(r *models.PasswordReset) string { return r.ID },
		s.Store.RehashPasswordReset)
	if err != nil {
		fail(c, resetError(err))
		return
	}
	hash, err := s.hashPassword(c.Request.Context(), req.NewPassword)
	if err != nil {
		fail(c, err)
		return
	}
	m, took, err := s.Store.ResetPassword(c.Request.Context(), r.ID, hash)
	if err != nil {
		fail(c, resetError(err))
		return
	}
	if took.Any() {
		s.Logger.Warn("password reset of an unconfirmed account took back what it was given", "merchantId", m.ID,
			"keysRevoked", took.KeysRevoked, "endpointsRemoved", took.EndpointsRemoved, "proofsWithdrawn", took.ProofsWithdrawn,
			"walletsCleared", took.WalletsCleared, "kybWithdrawn", took.KYBWithdrawn, "requestId", requestID(c))
	} else {
		s.Logger.Info("password reset", "merchantId", m.ID, "requestId", requestID(c))
	}
	respond(c, http.StatusOK, gin.H{"message": "password set; sign in with it", "emailConfirmed": true,
		"reclaimed": reclaimedJSON{KeysRevoked: took.KeysRevoked, WebhookEndpointsRemoved: took.EndpointsRemoved,
			WalletProofsWithdrawn: took.ProofsWithdrawn, WalletsCleared: took.WalletsCleared, KYBWithdrawn: took.KYBWithdrawn}})
}

// reclaimedJSON says what a reset of an unconfirmed account took back
// (all zero for a confirmed one).
type reclaimedJSON struct {
	KeysRevoked             int64 `json:"apiKeysRevoked"`
	WebhookEndpointsRemoved int64 `json:"webhookEndpointsRemoved"`
	WalletProofsWithdrawn   int64 `json:"walletProofsWithdrawn"`
	WalletsCleared          bool  `json:"walletsCleared"`
	KYBWithdrawn            bool  `json:"kybWithdrawn"`
}

// resetError is the answer to a reset link not found (unknown, used,
// replaced or expired), or err itself.
func resetError(err error) error {
	if errors.Is(err, apperr.ErrNotFound) {
		return errResetToken
	}
	return err
}

// hashPassword hashes a new password in one of the password gate's slots.
func (s *Server) hashPassword(ctx context.Context, password string) (string, error) {
	var hash string
	var err error
	if werr := s.passwords.hash(ctx, func() { hash, err = auth.HashPassword(password) }); werr != nil {
		return "", werr
	}
	return hash, err
}
