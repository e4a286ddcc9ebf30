package offsetslake;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import javax.security.sasl.AuthenticationException;
import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * The Thrift JDBC server's CUSTOM authentication (hive.server2.authentication=CUSTOM): a client's
 * password must be the endpoint's token, the one Spark Connect clients give as ";token=". jobs.serve
 * puts it in the system property below before it starts the server; the user name is free.
 */
public final class TokenAuthenticator implements PasswdAuthenticationProvider {
  static final String TOKEN_PROPERTY = "offsetslake.endpoint.token";

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    String token = System.getProperty(TOKEN_PROPERTY);
    if (token == null || token.isEmpty()) {
      throw new AuthenticationException("the endpoint has no token configured");
    }
    byte[] given = (password == null ? "" : password).getBytes(StandardCharsets.UTF_8);
    // constant time, so the comparison does not leak how much of a guess was right
    if (!MessageDigest.isEqual(given, token.getBytes(StandardCharsets.UTF_8))) {
      throw new AuthenticationException("wrong token for user " + user);
    }
  }
}
