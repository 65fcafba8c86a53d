package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/paygate/paygate/apperr"
	"github.com/paygate/paygate/auth"
	"github.com/paygate/paygate/models"
	"github.com/paygate/paygate/notify"
)

// Confirming the account's e-mail address. Anyone may sign up with any
// address, so the address proves nothing until the account's holder opens
// a link sent there while signed in: the link alone (a mailbox's owner who
// never signed up, clicking) confirms nothing, and the session alone (a
// stranger who typed the address) neither. Until then the account cannot
// submit its KYB application (an operator would read the address as the
// business's), and a password reset, which proves the mailbox only, takes
// back what the account was given (models.Store.ResetPassword).

const (
	// confirmTTL is how long a confirmation link works.
	confirmTTL = 48 * time.Hour
	// confirmsPerHour is how many confirmation e-mails an account is sent
	// in an hour at most.
	confirmsPerHour = 5
)

// confirmationsOn reports whether this server can confirm addresses: it
// sends e-mail, and knows the public address its links lead to.
func (s *Server) confirmationsOn() bool { return s.Mailer != nil && s.ResetBaseURL != "" }

// errConfirmToken is the answer to a confirmation link that is not the
// signed-in account's valid latest one.
var errConfirmToken = apperr.Invalid("token",
	"is not a valid confirmation link of this account, or it was used, replaced by a newer one or expired (ask for a new link)")

// sendConfirmation stores a confirmation link for m's address and e-mails
// it after the answer; false: the account's hourly number was reached.
func (s *Server) sendConfirmation(c *gin.Context, m *models.Merchant) (bool, error) {
	token, err := auth.GenerateConfirmToken()
	if err != nil {
		return false, err
	}
	created, err := s.Store.CreateEmailConfirmation(c.Request.Context(), m.ID, m.Email, m.Email, s.Hasher.Hash(token), confirmTTL, confirmsPerHour)
	if err != nil || !created {
		return false, err
	}
	link := strings.TrimRight(s.ResetBaseURL, "/") + "/dashboard/confirm-email?token=" + token
	s.mailLater(c, m.ID, notify.Message{To: m.Email, Subject: "Confirm your paygate e-mail address", Body: confirmMailBody(link)},
		"e-mail confirmation")
	return true, nil
}

// confirmMailBody is the confirmation e-mail. Like the reset e-mail it
// names no business (a stranger may have typed it), and it tells a reader
// who did not sign up what to do.
func confirmMailBody(link string) string {
	return fmt.Sprintf(`Hello,

a paygate account was created with this e-mail address. If it was you, open this link within 48 hours,
signed in to the account, to confirm the address:

%s

Until it is confirmed the account cannot apply for live payments (KYB).

If you did not sign up, someone typed your address: do not sign in with anything they gave you. To take
the account over, choose a password from "Forgot your password" on the sign-in page; that confirms the
address and removes the API keys, webhook endpoints and wallets they set up.
`, link)
}

// requestEmailConfirmation serves POST /api/auth/email-confirmation
// (session): a new link is e-mailed to the account's address.
func (s *Server) requestEmailConfirmation(c *gin.Context) {
	if !s.confirmationsOn() {
		fail(c, apperr.Unavailable("this server sends no e-mail, so it confirms no address; ask its operator", apperr.NoRetry))
		return
	}
	m, err := s.Store.Merchant(c.Request.Context(), principal(c).MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	if m.EmailConfirmedAt != nil {
		fail(c, apperr.Conflict("the account's e-mail address is confirmed already"))
		return
	}
	sent, err := s.sendConfirmation(c, m)
	if err != nil {
		fail(c, err)
		return
	}
	if !sent {
		s.tooManyLinks(c, m.ID)
		return
	}
	respondMessage(c, http.StatusAccepted, "a link to confirm "+m.Email+" is on its way; open it signed in, within 48 hours")
}

// tooManyLinks answers the request for a confirmation link past the hourly
// number: SPEC.md's 429, retryAfter when the oldest leaves the hour.
func (s *Server) tooManyLinks(c *gin.Context, merchantID string) {
	at, err := s.Store.EmailConfirmationAllowedAt(c.Request.Context(), merchantID, confirmsPerHour)
	if err != nil {
		fail(c, err)
		return
	}
	fail(c, apperr.TooMany(fmt.Sprintf("%d confirmation links were sent in the past hour, the most an hour; open the latest one, or ask again later",
		confirmsPerHour), at.Sub(s.Store.Now())))
}

type emailChangeRequest struct {
	NewEmail        string `json:"newEmail"`
	CurrentPassword string `json:"currentPassword"`
}

// requestEmailChange serves POST /api/auth/email-change (session, with the
// current password): a link is e-mailed to the new address, and the
// account's address becomes it, confirmed, when the link is opened signed
// in (POST /api/auth/email-confirmation/confirm). The current address is
// told of the request, and of the change once made. Until then nothing
// changes: sign-in, resets and notices go to the current address.
func (s *Server) requestEmailChange(c *gin.Context) {
	var req emailChangeRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	var v checker
	email := v.email("newEmail", req.NewEmail, true)
	checkGivenPassword(&v, "currentPassword", req.CurrentPassword)
	if err := v.err(); err != nil {
		fail(c, err)
		return
	}
	if !s.confirmationsOn() {
		fail(c, apperr.Unavailable("this server sends no e-mail, so it cannot confirm a new address; ask its operator", apperr.NoRetry))
		return
	}
	ctx := c.Request.Context()
	m, err := s.Store.Merchant(ctx, principal(c).MerchantID)
	if err != nil {
		fail(c, err)
		return
	}
	if email == m.Email {
		fail(c, apperr.Invalid("newEmail", "is the account's address already"))
		return
	}
	if !s.passwordHolds(c, m, "currentPassword", req.CurrentPassword) {
		return
	}
	accepted := "a link to confirm " + email + " is on its way; the address changes when it is opened signed in, within 48 hours"
	taken, err := s.Store.EmailTaken(ctx, m.ID, email)
	if err != nil {
		fail(c, err)
		return
	}
	if taken {
		// Answered as any other address, nothing sent: a 409 here told
		// anyone with an account which addresses have one, faster than
		// sign-up's tier lets them ask (an audit helper). An address that
		// is taken by the time a link is opened is a 409 then.
		s.Logger.Info("e-mail change to an address another account uses: no link sent", "merchantId", m.ID, "requestId", requestID(c))
		respondMessage(c, http.StatusAccepted, accepted)
		return
	}
	token, err := auth.GenerateConfirmToken()
	if err != nil {
		fail(c, err)
		return
	}
	created, err := s.Store.CreateEmailConfirmation(ctx, m.ID, m.Email, email, s.Hasher.Hash(token), confirmTTL, confirmsPerHour)
	if err != nil {
		fail(c, err)
		return
	}
	if !created {
		s.tooManyLinks(c, m.ID)
		return
	}
	// Fixed text in both e-mails: the business name, and the address the
	// account holder typed, are anyone's words (sign-up proves nothing),
	// and these go to addresses they choose.
	link := strings.TrimRight(s.ResetBaseURL, "/") + "/dashboard/confirm-email?change=1&token=" + token
	s.mailLater(c, m.ID, notify.Message{To: email, Subject: "Confirm your new paygate e-mail address", Body: fmt.Sprintf(`Hello,

a paygate account asked to use this address from now on. If it was you, open this link within 48 hours,
signed in to the account, to make the change:

%s

If you did not ask for it, ignore this e-mail: nothing changes.
`, link)}, "e-mail change")
	s.mailLater(c, m.ID, notify.Message{To: m.Email, Subject: "Your paygate e-mail address is to change", Body: `Hello,

your paygate account asked to use another e-mail address instead of this one. The change is made only when
the link sent there is opened, signed in to the account; until then nothing changes.

If it was not you, sign in, change your password and sign out every other session (Settings).
`}, "e-mail change notice")
	s.Logger.Info("e-mail change asked", "merchantId", m.ID, "requestId", requestID(c))
	respondMessage(c, http.StatusAccepted, accepted)
}

type confirmEmailRequest struct {
	Token string `json:"token"`
}

// confirmEmail serves POST /api/auth/email-confirmation/confirm (session):
// the link's token, opened by the account it was sent for, confirms the
// address once.
func (s *Server) confirmEmail(c *gin.Context) {
	var req confirmEmailRequest
	if err := bindJSON(c, &req); err != nil {
		fail(c, err)
		return
	}
	token := strings.TrimSpace(req.Token)
	if token == "" {
		fail(c, apperr.Invalid("token", "is required"))
		return
	}
	if !strings.HasPrefix(token, auth.ConfirmPrefix) || len(token) > 128 {
		fail(c, errConfirmToken)
		return
	}
	p := principal(c)
	conf, err := lookupRotating(c, s, token, s.Store.EmailConfirmationByHash, func(e *models.EmailConfirmation) string { return e.ID },
		s.Store.RehashEmailConfirmation)
	if err == nil && conf.MerchantID != p.MerchantID {
		// Another account's link: not this one's to use (and not used).
		err = apperr.NotFound()
	}
	var m *models.Merchant
	if err == nil {
		m, err = s.Store.ConfirmEmail(c.Request.Context(), p.MerchantID, conf.ID)
	}
	if errors.Is(err, apperr.ErrNotFound) {
		// A 409 only for this account's link to the address it has,
		// confirmed (the link opened twice, a change's included): a dead
		// change link (replaced, ended by a reset) or another account's is
		// the token's 400, not "confirmed already", which the dashboard
		// shows as done (a review helper).
		cur, cerr := s.Store.Merchant(c.Request.Context(), p.MerchantID)
		ever, eerr := s.Store.EmailConfirmationEverByHash(c.Request.Context(), s.Hasher.Hash(token))
		if cerr == nil && eerr == nil && cur.EmailConfirmedAt != nil && ever.MerchantID == cur.ID && ever.Email == cur.Email {
			fail(c, apperr.Conflict("the account's e-mail address is confirmed already"))
			return
		}
		err = errConfirmToken
	}
	if err != nil {
		fail(c, err)
		return
	}
	if m.PreviousEmail != "" {
		s.Logger.Info("e-mail address changed", "merchantId", m.ID, "requestId", requestID(c))
		s.mailLater(c, m.ID, notify.Message{To: m.PreviousEmail, Subject: "Your paygate e-mail address was changed", Body: `Hello,

your paygate account now uses another e-mail address, proven by a link sent there: sign in with that one
from now on. This address gets no more e-mail about the account.

If it was not you, tell your operator at once: the account's password and session were used to make the
change.
`}, "e-mail changed notice")
	} else {
		s.Logger.Info("e-mail address confirmed", "merchantId", m.ID, "requestId", requestID(c))
	}
	respond(c, http.StatusOK, toMerchantJSON(m))
}
